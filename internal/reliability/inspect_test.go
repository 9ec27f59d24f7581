package reliability

import (
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
)

// allocOwner and allocBlockSize read alloc.Inspect, the one question about
// a block (its owner, its size).
func allocOwner(p unsafe.Pointer) (*alloc.Allocator, error) {
	info, err := alloc.Inspect(p)
	return info.Allocator, err
}

func allocBlockSize(p unsafe.Pointer) (uintptr, error) {
	info, err := alloc.Inspect(p)
	return info.Size, err
}
