package heap

import (
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fault"
)

// MapSource maps anonymous memory through libc's mmap: the C heap's own
// source, never the Go heap.
type MapSource struct{}

// Acquire maps n zeroed bytes aligned to align.
func (MapSource) Acquire(n, align uintptr) (uintptr, error) {
	if err := fault.Check(fault.HeapAcquire); err != nil {
		return 0, err
	}
	c, err := dl.C()
	if err != nil {
		return 0, err
	}
	return c.MapAligned(n, align)
}

// Release unmaps [p, p+n).
func (MapSource) Release(p, n uintptr) error {
	c, err := dl.C()
	if err != nil {
		return err
	}
	return c.Unmap(p, n)
}

// A RegionSizer maps huge regions in units larger than the heap's pages
// (hugetlb: 2 MiB): the heap sizes a region to what the source will map,
// so that what it counts, reuses and releases is what is mapped.
type RegionSizer interface {
	RegionSize(n uintptr) uintptr
}
