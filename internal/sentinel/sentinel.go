// Package sentinel holds the sentinel errors that several of ompalloc's packages
// return for the same condition, so that each condition has one variable
// and one meaning: a test with errors.Is matches it whichever layer (the
// registry, a plugin, target, alloc) found the fault. Package target
// re-exports all of them, package alloc ErrInvalidArgument: a user tests
// target.ErrNotLocked, never a package-local copy.
package sentinel

import "errors"

var (
	// ErrInvalidArgument: an argument no call could accept: a nil pointer,
	// a zero size, a range that wraps around the address space, an unknown
	// kind or mode, a queue of another device.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBusy: refused because the memory is still in use (a registry
	// entry that locks still reference, a device whose pinned memory
	// allocators still hold); nothing was changed.
	ErrBusy = errors.New("busy: still referenced")
	// ErrNotLocked: an unlock of an address that no lock holds (or whose
	// entry holds no reference of the kind being dropped).
	ErrNotLocked = errors.New("not locked")
	// ErrOverlap: a range that partly overlaps locked ranges (it runs past
	// an entry's end, starts before one and reaches into it, or spans
	// several), or is only partly inside externally locked memory.
	ErrOverlap = errors.New("partial overlap with a pinned entry")
	// ErrStillLocked: an unlock the device refused, leaving the range locked
	// exactly as before (munlock refused at vm.max_map_count, say); the
	// registry keeps the entry and its references so that the unlock can be
	// tried again.
	ErrStillLocked = errors.New("still locked")
)
