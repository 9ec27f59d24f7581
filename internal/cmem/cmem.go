package cmem

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"
)

// Ptr returns p as an unsafe.Pointer. p must not be Go memory.
func Ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// Bytes returns the n bytes at p as a slice with len == cap == n.
func Bytes(p, n uintptr) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(Ptr(p)), n)
}

// Zero sets the n bytes at p to zero.
func Zero(p, n uintptr) { clear(Bytes(p, n)) }

// Copy copies n bytes from src to dst; the ranges may overlap.
func Copy(dst, src, n uintptr) { copy(Bytes(dst, n), Bytes(src, n)) }

// ErrFault: a copy touched an address that is not mapped, or not with the
// access it needed (the kernel's EFAULT, as Go's runtime reports a fault).
var ErrFault = errors.New("bad address")

// FillChecked sets the n bytes at p to c, surviving a fault as CopyChecked
// does (omp_target_memset of memory the runtime does not know).
func FillChecked(p, n uintptr, c byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("fill of %d bytes at %#x: %w at %#x", n, p, ErrFault, f.Addr())
		}
	}()
	b := Bytes(p, n)
	for i := range b {
		b[i] = c
	}
	return nil
}

// CopyChecked is Copy for ranges nobody could bound-check (memory the
// runtime does not know, handed to omp_target_memcpy): a fault on either
// side is recovered (debug.SetPanicOnFault, for this goroutine and this
// call only) and returned as an error matching ErrFault that names the
// address, instead of killing the process. The bytes before the fault may
// have been copied.
func CopyChecked(dst, src, n uintptr) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r) // not a fault: not ours to hide
			}
			err = fmt.Errorf("copy of %d bytes from %#x to %#x: %w at %#x", n, src, dst, ErrFault, f.Addr())
		}
	}()
	Copy(dst, src, n)
	return nil
}
