package pinned

import "errors"

// Errors returned by the registry; test with errors.Is. The returned errors
// wrap them with the ranges involved.
var (
	// ErrOverlap: the range partly overlaps one or more entries (it runs past
	// an entry's end, starts before one and reaches into it, or spans
	// several), or is only partly inside externally locked memory.
	ErrOverlap = errors.New("partial overlap with a pinned entry")
	// ErrNotLocked: no entry holds the address, or the entry holds no
	// reference of the kind being dropped.
	ErrNotLocked = errors.New("not locked")
	// ErrBusy: Unregister of an entry that Lock or LockMapped still
	// reference, or a reference count that would overflow.
	ErrBusy = errors.New("pinned entry still referenced")
	// ErrInvalid: a nil pointer, a zero size, a range that wraps around the
	// address space, an unknown MapMode, or Unregister of something that
	// Register did not record.
	ErrInvalid = errors.New("invalid argument")
	// ErrStillLocked: a Locker's UnlockHost failed and the range is still
	// locked exactly as before (munlock refused at vm.max_map_count, say).
	// A Locker wraps it to ask the registry to keep the entry and its
	// references, so that the unlock can be tried again; the registry wraps
	// it in the error it returns.
	ErrStillLocked = errors.New("still locked")
)
