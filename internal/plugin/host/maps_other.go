//go:build !linux

package host

// scanMaps has no /proc/self/maps to read.
func scanMaps(p, end uintptr) (count int, hole uintptr, ok bool) { return 0, 0, false }

func maxMapCount() (int, bool) { return 0, false }

func scanMapsEach(p, end uintptr, each func(lo, hi uintptr)) (count int, hole uintptr, ok bool) {
	return 0, 0, false
}
