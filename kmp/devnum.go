package kmp

import (
	"fmt"

	"github.com/ompalloc/ompalloc/target"
)

// OpenMP 5.2 device numbers. Every routine of this package that takes a
// device number accepts InitialDevice for the host, as it accepts
// GetInitialDevice(); both name the same device. InvalidDevice is the
// number OpenMP reserves for "no device": passing it is a runtime error
// (OpenMP 5.2 requires runtime error termination). Since bad input never
// ends the process here, it is reported as every bad device number is: one
// warning line naming omp_invalid_device, and the routine's failure result
// (nil, -1, 0, NullMemSpace, NullAllocator, or an _async task whose Wait
// is -1 and whose Err matches ErrInvalidDevice). It is checked before any
// other argument, so even a call that would do nothing (a zero size, a nil
// pointer to free) reports it.
const (
	// InitialDevice is omp_initial_device (-1 in LLVM's and GCC's omp.h):
	// the host, whatever GetNumDevices says.
	InitialDevice = -1
	// InvalidDevice is omp_invalid_device, LLVM's value (omp.h defines it
	// as -2; GCC's libgomp uses -4, which is an unknown device here, also
	// refused with a warning).
	InvalidDevice = -2
)

// ErrInvalidDevice: omp_invalid_device was passed as a device number
// (Task.Wait of an _async routine returns it). It matches
// target.ErrBadDevice too.
var ErrInvalidDevice = fmt.Errorf("omp_invalid_device (%d) is not a device: OpenMP makes its use a runtime error: %w", InvalidDevice, target.ErrBadDevice)

// deviceNum maps an OpenMP device number to target's numbering:
// InitialDevice becomes the host's number (GetInitialDevice), every other
// number stays as it is (target.Get judges it). InvalidDevice is
// ErrInvalidDevice.
func deviceNum(dev int) (int, error) {
	switch dev {
	case InitialDevice:
		return target.InitialDevice(), nil
	case InvalidDevice:
		return dev, ErrInvalidDevice
	}
	return dev, nil
}

// devArg is deviceNum for a routine with no error to return: a warning on
// behalf of fn for InvalidDevice, and ok false.
func devArg(fn string, dev int) (int, bool) {
	n, err := deviceNum(dev)
	if err != nil {
		warnf("%s: %v", fn, err)
		return n, false
	}
	return n, true
}

// devArgs is devArg for a source and a destination device.
func devArgs(fn string, dst, src int) (int, int, bool) {
	d, ok := devArg(fn, dst)
	if !ok {
		return d, src, false
	}
	s, ok := devArg(fn, src)
	return d, s, ok
}
