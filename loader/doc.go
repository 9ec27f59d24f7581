// Package loader holds the errors ompalloc returns when a shared library it
// loads at run time (libc, NVIDIA's libcuda.so.1, AMD's
// libhsa-runtime64.so.1) is absent, switched off, fails to initialise or
// lacks a symbol. Test for them with errors.Is:
//
//	if _, err := target.Get(1); errors.Is(err, loader.ErrNotFound) {
//		// no GPU driver on this machine: run on the host
//	}
//
// ompalloc opens libraries through purego, with no cgo; nothing is loaded at
// import, a library is opened once, at first use, and never closed.
package loader
