//go:build !linux || !(amd64 || arm64)

package numa

func mbind(p, n uintptr, mode Mode, nodes []int, flags uintptr) error { return ErrUnsupported }

// GetPolicy returns ErrUnsupported on this system.
func GetPolicy(p uintptr) (Mode, []int, error) { return 0, nil, ErrUnsupported }

// PageNodes returns ErrUnsupported on this system.
func PageNodes(addrs []uintptr) ([]int, error) { return nil, ErrUnsupported }

// CurrentNode is node 0 on this system: it has one.
func CurrentNode() (int, error) { return 0, nil }

// Supported reports whether this system takes memory policies.
func Supported() bool { return false }

// SetThreadPolicy returns ErrUnsupported on this system.
func SetThreadPolicy(mode Mode, nodes []int) (restore func() error, err error) {
	return nil, ErrUnsupported
}

// ThreadPolicy returns ErrUnsupported on this system.
func ThreadPolicy() (Mode, []int, error) { return 0, nil, ErrUnsupported }
