//go:build !linux

package numa

// AdviseHuge returns ErrUnsupported: no transparent huge pages to ask for.
func AdviseHuge(p, n uintptr) error { return ErrUnsupported }
