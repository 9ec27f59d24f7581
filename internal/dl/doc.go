// Package dl opens shared libraries at run time through purego, with no
// cgo: the process's libc (for chunks of memory and page locking) and the GPU
// drivers. Nothing is loaded at import; a library is opened once, at first
// use, and never closed.
package dl
