package target

import "strings"

// DriverError is why a vendor's driver gives no devices, with the advice a
// user needs: what the failure means on this machine and what to do ("the
// CUDA driver is installed, but it finds no NVIDIA GPU ..."). It is the Err
// of every DriverStatus that has one (Plugins), so that any program, not
// only `ompalloc info`, can tell a user why there is no GPU:
//
//	for _, s := range target.Plugins() {
//		var de *target.DriverError
//		if errors.As(s.Err, &de) {
//			log.Printf("%s: %s", de.Plugin, de.Advice)
//		}
//	}
//
// It wraps the plugin's error: errors.Is matches loader.ErrNotFound (no
// library), loader.ErrDisabled (switched off by OMPALLOC_DISABLE_CUDA or
// OMPALLOC_DISABLE_HSA), loader.ErrSymbolMissing (a library older than
// ompalloc needs, or another library) and loader.ErrInitFailed (the driver
// loaded but its initialisation failed, or it is older than ompalloc needs:
// CUDA before 11.0), as cilium/ebpf's feature errors carry their reason.
type DriverError struct {
	Plugin  string // "cuda", "amdgpu", "host"
	Library string // the library loaded, "" when none
	Init    string // the driver's answer: "CUDA_ERROR_NO_DEVICE", "not found: ...", "driver too old: CUDA 10.2"
	Advice  string // in words, what it means here and what to do; "" when the plugin has none
	Err     error  // the plugin's error
}

// Error is the plugin, its error and the advice: "cuda: ...: CUDA_ERROR_NO_DEVICE (100); the CUDA driver is installed, but ...".
func (e *DriverError) Error() string {
	var b strings.Builder
	b.WriteString(e.Plugin)
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Advice != "" {
		b.WriteString("; ")
		b.WriteString(e.Advice)
	}
	return b.String()
}

// Unwrap returns the plugin's error.
func (e *DriverError) Unwrap() error { return e.Err }

// withDriverErrors adds to err, a device number out of range, the
// DriverErrors of the accelerator drivers that gave no devices: asked for
// a GPU, the program learns why there is none (errors.As finds the first).
func withDriverErrors(err error, ps []DriverStatus) error {
	var why []string
	errs := []error{err}
	for _, s := range ps {
		if s.Err != nil && s.Plugin != "host" {
			why = append(why, s.Err.Error())
			errs = append(errs, s.Err)
		}
	}
	if len(why) == 0 {
		return err
	}
	return &joined{msg: err.Error() + "; no devices from " + strings.Join(why, "; "), errs: errs}
}

// joined is errors.Join's matching with one line of text.
type joined struct {
	msg  string
	errs []error
}

func (j *joined) Error() string   { return j.msg }
func (j *joined) Unwrap() []error { return j.errs }

// driverError makes s.Err a *DriverError.
func driverError(s DriverStatus) DriverStatus {
	if s.Err != nil {
		s.Err = &DriverError{Plugin: s.Plugin, Library: s.Library, Init: s.Init, Advice: s.Advice, Err: s.Err}
	}
	return s
}
