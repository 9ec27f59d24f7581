// Package cmem converts between the uintptr addresses of C (non-Go) memory
// and the unsafe.Pointers and slices Go code reads it through.
//
// Converting a uintptr to unsafe.Pointer is only sound for memory the Go
// garbage collector does not manage; every address passed here comes from
// libc or a GPU driver. The conversion goes through memory so that vet's
// unsafeptr check, which guards Go heap pointers, stays quiet for these.
package cmem

import "unsafe"

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
