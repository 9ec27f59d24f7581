//go:build linux || darwin

package dlcall

import "github.com/ebitengine/purego"

// Call calls the C function at fn with integer or pointer arguments and
// returns its integer result. It costs ~100 ns: keep it off hot paths.
// Pointers passed must be C memory, or Go memory converted in the call's
// argument list (uintptr(unsafe.Pointer(&x))), which uintptrescapes keeps
// alive and in place for the call.
//
//go:uintptrescapes
func Call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
