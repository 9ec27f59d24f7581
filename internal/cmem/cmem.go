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
