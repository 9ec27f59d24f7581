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

var (
	table atomic.Pointer[[]*Head]
	// entries is the published table as a fixed array of atomic pointers,
	// one per number, for Live: indexed by the handle's number with no
	// table load and no bounds check (512 KiB of zero pages but for the
	// entries set). Publish keeps it equal to table.
	entries [Mask + 1]atomic.Pointer[Head]
)

// Live returns the entry of the live allocator with handle h, or nil: for
// the null handle (entry 0 is always nil), a stale handle (an older
// generation than its number's entry), a destroyed allocator, and before
// the table is published. Small enough to inline.
func Live(h uintptr) unsafe.Pointer {
	if e := entries[h&Mask].Load(); e != nil && e.Handle == h && !e.Destroyed.Load() {
		return unsafe.Pointer(e)
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

// Publish makes t the table. t must not be written afterwards, each of its
// entries' Handle must be set before, and calls must not overlap (alloc
// holds its table lock). Each changed entry is stored atomically in the
// array Live reads, after the fields it points at were set, so a reader
// that loads it sees them (Go's memory model, any architecture).
func Publish(t []*Head) {
	old := Table()
	for i := range min(max(len(old), len(t)), Mask+1) { // no number is above Mask
		var e *Head
		if i < len(t) {
			e = t[i]
		}
		if i >= len(old) || old[i] != e {
			entries[i].Store(e)
		}
	}
	table.Store(&t)
}
