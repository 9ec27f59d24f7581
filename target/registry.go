package target

import (
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/pinned"
)

// Registry is a read-only view of one device's pinned registry: every host
// range locked for the device (LockMem, Pin, a mapped transfer) or held by
// a pinned allocator, and the device's own pinned host allocations. Its
// answers are package pinned's types.
//
// It has no way to take or drop a reference. Lock and unlock through
// Device.LockMem and UnlockMem, Pin and Unpin, or a pinned allocator: they
// keep the registry, the allocators' pools and the kernel in agreement
// (an entry a pinned allocator holds cannot be unlocked by a user at all).
type Registry struct{ r *pinreg.Registry }

// Entry returns the state of the entry containing p: its range, the
// device's address for it (the device's address for p is
// Dev + p - Host) and its references. Whether a slice is pinned for any
// device is IsPinned's question, the one a program asks.
func (v Registry) Entry(p uintptr) (pinned.EntryInfo, bool) { return v.r.Entry(p) }

// Held reports whether the entry starting at p is held by a part of the
// runtime (a pinned allocator's chunk), and by whom.
func (v Registry) Held(p uintptr) (owner string, ok bool) { return v.r.Held(p) }

// Stats returns the registry's counters: its entries (Entries), those a
// part of the runtime holds (HeldEntries, HeldBytes), locks and unlocks.
// It visits every entry: not for hot paths.
func (v Registry) Stats() pinned.Stats { return v.r.Stats() }

// Each calls f with every entry, in address order, until f returns false.
// f must not call the registry or lock or unlock on the device.
func (v Registry) Each(f func(pinned.EntryInfo) bool) { v.r.Each(f) }
