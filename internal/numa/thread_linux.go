//go:build linux && (amd64 || arm64)

package numa

import (
	"fmt"
	"syscall"
	"unsafe"
)

// SetThreadPolicy sets the calling thread's memory policy
// (set_mempolicy(2)): pages the thread faults in, and pages a driver
// allocates on its behalf in a system call, follow it. It returns a
// function that puts back the policy the thread had. The caller must hold
// its OS thread (runtime.LockOSThread) from the call until restore has run:
// the policy belongs to the thread, not the goroutine.
//
// For memory that only a driver allocates (cuMemAllocHost), this is the
// one way to ask for a node: there is no address to mbind beforehand.
func SetThreadPolicy(mode Mode, nodes []int) (restore func() error, err error) {
	oldMode, old, err := ThreadPolicy()
	if err != nil {
		return nil, err
	}
	if err := setPolicy(mode, nodeMask(nodes)); err != nil {
		return nil, fmt.Errorf("%w: set_mempolicy %v %s: %w", ErrPolicy, mode, FormatList(nodes), err)
	}
	return func() error {
		if err := setPolicy(oldMode, nodeMask(old)); err != nil {
			return fmt.Errorf("%w: set_mempolicy (restoring %v): %w", ErrPolicy, oldMode, err)
		}
		return nil
	}, nil
}

// ThreadPolicy returns the calling thread's memory policy: its mode and
// nodes (get_mempolicy(2) without flags).
func ThreadPolicy() (Mode, []int, error) {
	var mode int32
	var m [maskWords]uint64
	if _, _, e := syscall.Syscall6(sysGetMempolicy, uintptr(unsafe.Pointer(&mode)), uintptr(unsafe.Pointer(&m[0])),
		maskWords*64, 0, 0, 0); e != 0 {
		return 0, nil, fmt.Errorf("%w: get_mempolicy: %w", ErrPolicy, e)
	}
	return Mode(mode &^ mpolModeFlags), maskNodes(m[:]), nil
}

func setPolicy(mode Mode, m []uint64) error {
	var e syscall.Errno
	if len(m) == 0 {
		_, _, e = syscall.Syscall(sysSetMempolicy, uintptr(mode), 0, 0)
	} else {
		// maxnode is one more than the bits, as for mbind.
		_, _, e = syscall.Syscall(sysSetMempolicy, uintptr(mode), uintptr(unsafe.Pointer(&m[0])), uintptr(len(m))*64+1)
	}
	if e != 0 {
		return e
	}
	return nil
}
