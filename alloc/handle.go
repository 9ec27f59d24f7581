package alloc

import "github.com/ompalloc/ompalloc/internal/predef"

// String names the handle as every message of ompalloc does: the live
// allocator's name ("omp_default_mem_alloc",
// "allocator#1025(omp_default_mem_space, pinned)"), or, for a handle that
// names no live allocator, "allocator#1025" (and "omp_null_allocator" for 0).
func (h handle) String() string {
	if h != predef.Null {
		if a, ok := lookup(h); ok {
			return a.String()
		}
	}
	return predef.Name(uintptr(h))
}
