package handles

import (
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/heap"
)

// Head is the first field of every alloc.Allocator: what Live checks and
// Alloc serves from (the handle, the destroyed flag and the heap's hot-path
// descriptor; see heap.Entry).
type Head = heap.Entry

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

// Alloc is omp_alloc's hot path for handle h: a cached block of size bytes
// from h's live plain host allocator, in heap.AllocEntry's one frame; every
// other case is slow's (see heap.AllocEntry; not nil). Inlines, so that
// kmp's omp_alloc, which is this call, inlines too.
func Alloc(h, size uintptr, slow func(e *Head, h, size uintptr) uintptr) uintptr {
	return heap.AllocEntry(&entries[h&Mask], h, size, slow)
}

// Free is omp_free's whole path for a Go caller that only warns: alloc.Free
// (heap.FreeFast, whose errors it hands to report, never nil here) in one
// frame of the engine. Inlines, so that kmp's omp_free, which is this call,
// inlines too and costs no frame of its own.
func Free(p uintptr, report func(p uintptr, err error)) {
	_ = heap.FreeFast(p, true, report) // nil: report had the error
}

// General, set by alloc's init, is omp_alloc's general path for handle h,
// for a caller of Alloc whose slow function must not try the hot path again
// nor look the handle up again (kmp's omp_alloc): e is the entry Alloc's
// slow function got (nil: look h up). live false when h names no live
// allocator (nothing was tried), else the allocator's Alloc result but for
// the hot path.
var General func(e *Head, h, size uintptr) (p uintptr, live bool, err error)

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
