package handles

import (
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/heap"
)

// Head is the first field of every alloc.Allocator: what Live checks.
type Head struct {
	// Handle is the allocator's omp.h handle: its number (the table
	// index, Handle&Mask) and, above it, the number's generation. Set
	// before the allocator is published, never changed.
	Handle uintptr
	// Destroyed is set once, by omp_destroy_allocator.
	Destroyed atomic.Bool
	// Fast is the allocator's descriptor for the heap's hot path (the zero
	// Fast, serving nothing, for all but plain host allocators): omp_alloc
	// calls it straight from the handle, one frame of the engine. Set
	// before the allocator is published, never changed.
	Fast heap.Fast
}

// Mask takes a handle's number, its index in the table.
const Mask = 1<<16 - 1

var table atomic.Pointer[[]*Head]

// Live returns the entry of the live allocator with handle h, or nil: for
// the null handle (entry 0 is always nil), a stale handle (an older
// generation than its number's entry), a destroyed allocator, and before
// the table is published. Small enough to inline.
func Live(h uintptr) unsafe.Pointer {
	if t := table.Load(); t != nil && uint(h&Mask) < uint(len(*t)) {
		if e := (*t)[h&Mask]; e != nil && e.Handle == h && !e.Destroyed.Load() {
			return unsafe.Pointer(e)
		}
	}
	return nil
}

// Table returns the published table (nil before the first Publish). It is
// never written: Publish replaces it.
func Table() []*Head {
	if t := table.Load(); t != nil {
		return *t
	}
	return nil
}

// Publish makes t the table. t must not be written afterwards, and each of
// its entries' Handle must be set before.
func Publish(t []*Head) { table.Store(&t) }
