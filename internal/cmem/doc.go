// Package cmem converts between the uintptr addresses of C (non-Go) memory
// and the unsafe.Pointers and slices Go code reads it through.
//
// Converting a uintptr to unsafe.Pointer is only sound for memory the Go
// garbage collector does not manage; every address passed here comes from
// libc or a GPU driver. The conversion goes through memory so that vet's
// unsafeptr check, which guards Go heap pointers, stays quiet for these.
//
// HasPointers says which Go types may live in such memory at all: the
// garbage collector does not scan it, so a value holding Go pointers there
// would let their targets be freed.
package cmem
