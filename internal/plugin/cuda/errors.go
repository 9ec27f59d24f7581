package cuda

import (
	"errors"
	"fmt"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Error is a failed driver call: the call (without version suffix), the
// CUresult and the driver's name for it.
type Error struct {
	Call string // "cuMemHostRegister"
	Code int    // 712
	Name string // "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
}

// DriverCall names the failed function (plugin.CallError).
func (e *Error) DriverCall() string { return e.Call }

func (e *Error) Error() string {
	if e.Call == "" {
		return fmt.Sprintf("%s (%d)", e.Name, e.Code)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
}

// Is matches a code sentinel (an *Error without Call) by code, so that
// errors.Is(err, cuda.ErrAlreadyRegistered) holds for any call that failed so;
// CUDA_ERROR_OUT_OF_MEMORY also matches plugin.ErrOutOfMemory.
func (e *Error) Is(target error) bool {
	if target == plugin.ErrOutOfMemory {
		return e.Code == cudaErrorOutOfMemory
	}
	t, ok := target.(*Error)
	return ok && t.Call == "" && t.Code == e.Code
}

// CUresult values the plugin acts on.
const (
	cudaSuccess                    = 0
	cudaErrorInvalidValue          = 1
	cudaErrorOutOfMemory           = 2
	cudaErrorNotInitialized        = 3
	cudaErrorNoDevice              = 100
	cudaErrorInvalidDevice         = 101
	cudaErrorNoBinaryForGPU        = 209
	cudaErrorInvalidContext        = 201
	cudaErrorInvalidHandle         = 400
	cudaErrorNotReady              = 600
	cudaErrorPeerAlreadyEnabled    = 704
	cudaErrorTooManyPeers          = 711
	cudaErrorHostAlreadyRegistered = 712
	cudaErrorHostNotRegistered     = 713
	cudaErrorNotSupported          = 801
	cudaErrorSystemDriverMismatch  = 803
)

// Code sentinels; test with errors.Is.
var (
	ErrInvalidValue      = codeErr(cudaErrorInvalidValue)
	ErrOutOfMemory       = codeErr(cudaErrorOutOfMemory)
	ErrNotInitialized    = codeErr(cudaErrorNotInitialized)
	ErrNoDevice          = codeErr(cudaErrorNoDevice)
	ErrInvalidContext    = codeErr(cudaErrorInvalidContext)
	ErrAlreadyRegistered = codeErr(cudaErrorHostAlreadyRegistered)
	ErrNotRegistered     = codeErr(cudaErrorHostNotRegistered)
	ErrNotSupported      = codeErr(cudaErrorNotSupported)
)

// Plugin-side errors; test with errors.Is.
var (
	// ErrNotLocked: UnlockHost of an address this device never locked.
	ErrNotLocked = sentinel.ErrNotLocked
	// ErrNotAllocated: Free of an address Alloc never returned, or with
	// another kind than it was allocated with.
	ErrNotAllocated = errors.New("not allocated by this device")
	// ErrClosed: the device or queue was closed.
	ErrClosed = errors.New("closed")
	// ErrWorkPending: the work of a queue destroyed after a failed wait is
	// not known to be done yet (Queue.Query, Queue.Synchronize).
	ErrWorkPending = errors.New("work of a destroyed queue not known done")
	// ErrInitNotCalled: Status before the plugin's Init (not the driver's
	// CUDA_ERROR_NOT_INITIALIZED, which is ErrNotInitialized).
	ErrInitNotCalled = errors.New("CUDA plugin: Init not called")
)

// names are the driver's names of the codes this package may meet, used when
// the library cannot say (not loaded, or cuGetErrorName refuses the code).
var names = map[int]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
	46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
	201: "CUDA_ERROR_INVALID_CONTEXT", 400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", 705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", 711: "CUDA_ERROR_TOO_MANY_PEERS", 712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", 800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED",
	999: "CUDA_ERROR_UNKNOWN",
}

func staticName(code int) string {
	if n, ok := names[code]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", code)
}

func codeErr(code int) *Error { return &Error{Code: code, Name: staticName(code)} }

// opErr is the error of an operation on d: target names the device by its
// OpenMP number and the operation itself, and keeps only err (plugin.Cause).
func (d *device) opErr(err error, format string, args ...any) error {
	return &plugin.OpError{Dev: d.String(), Op: fmt.Sprintf(format, args...), Err: err}
}
