package plugin

import "errors"

// OpError is a plugin's error for an operation on one of its devices: Dev
// names the device as the plugin numbers it ("CUDA device 0", "amdgpu
// device 0"), Op says what was done, Err is the driver's error (the
// function, its code and text). Alone it reads "Dev: Op: Err"; package
// target, which names the device by its OpenMP number and the operation
// itself, reports Err only (Cause), so that a message says each thing once
// and never the plugin's own numbering.
type OpError struct {
	Dev, Op string
	Err     error
}

func (e *OpError) Error() string { return e.Dev + ": " + e.Op + ": " + e.Err.Error() }

func (e *OpError) Unwrap() error { return e.Err }

// Cause returns what a caller that names the device and the operation
// itself should wrap: an OpError's Err, any other error as it is.
func Cause(err error) error {
	var op *OpError
	if errors.As(err, &op) && op == err {
		return op.Err
	}
	return err
}

// CallError is a vendor's error of one failed driver call (cuda.Error,
// amdgpu.Error): its text is the function, the code and the driver's own
// words. Where a refusal reaches target under other layers' words (the
// registry's, the plugin's lock table's), target words the message itself
// and quotes only this, keeping the whole chain for errors.Is and As.
type CallError interface {
	error
	DriverCall() string // the function that failed, "cuMemHostRegister"
}
