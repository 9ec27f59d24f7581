package device

import (
	"errors"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Errors of the device core; target re-exports them under the same names.
var (
	// ErrBadDevice: a device number outside 0..NumDevices().
	ErrBadDevice = errors.New("no such device")
	// ErrShutdown: the device was closed by Shutdown.
	ErrShutdown = errors.New("device shut down")
	// ErrUnavailable: the device is listed but could not be opened (a CUDA
	// GPU in compute mode PROHIBITED, or out of memory for its context);
	// the error also carries the driver's reason. Other devices work.
	ErrUnavailable = errors.New("device unavailable")
	// ErrBusy: Shutdown refused because pinned heaps still hold locked
	// chunks for live blocks; nothing was shut down. The one busy
	// condition of the module (target.ErrBusy, pinned's).
	ErrBusy = sentinel.ErrBusy
)
