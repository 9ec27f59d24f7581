// Package memory stands in for github.com/apache/arrow-go/v18/arrow/memory
// (see ../../../README.md).
package memory

// Allocator is Arrow's allocator interface, exactly.
type Allocator interface {
	Allocate(size int) []byte
	Reallocate(size int, b []byte) []byte
	Free(b []byte)
}
