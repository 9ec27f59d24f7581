package target

import "github.com/ompalloc/ompalloc/internal/sentinel"

// Errors of locking and unlocking host memory (Device.LockMem and
// UnlockMem, Pin and Unpin, a pinned allocator's chunks, Shutdown); test
// with errors.Is. Each is one variable wherever it is found: the registry,
// a driver plugin and this package return the same.
var (
	// ErrOverlap: a range that partly overlaps locked ranges (it runs past
	// an entry's end, starts before one and reaches into it, or spans
	// several), or is only partly inside memory locked outside ompalloc.
	// Nothing was locked.
	ErrOverlap = sentinel.ErrOverlap
	// ErrNotLocked: an unlock of an address no lock holds, or of memory a
	// pinned allocator holds for itself (the message names its owner).
	ErrNotLocked = sentinel.ErrNotLocked
	// ErrStillLocked: the driver refused an unlock and the range stays
	// locked as before (munlock refused at vm.max_map_count, say); the
	// lock and its references are kept, so the unlock can be tried again.
	ErrStillLocked = sentinel.ErrStillLocked
	// ErrBusy: refused because the memory is still in use, nothing changed:
	// Shutdown while pinned allocators hold locked chunks for live blocks,
	// Device.Free of host-pinned memory that locks still reference.
	ErrBusy = sentinel.ErrBusy
)
