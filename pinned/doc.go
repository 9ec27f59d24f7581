// Package pinned holds what a device's pinned registry reports: the kind
// and state of an entry (EntryInfo, Kind) and the registry's counters
// (Stats). The errors locking returns are package target's (ErrOverlap,
// ErrNotLocked, ErrStillLocked, ErrBusy; test them with errors.Is). Whether
// a slice is pinned for any device is target.IsPinned's answer. Read a
// device's registry through target:
//
//	d, _ := target.Get(0)
//	e, ok := d.Registry().Entry(p) // the whole range, the device's address, its kind and references
//	st := d.Registry().Stats()     // entries, held entries and bytes, locks and unlocks
//
// The registry itself is read-only from outside the runtime. Locking goes
// through a pinned allocator (alloc.WithPinned), target.Pin for a Go slice,
// Device.LockMem and UnlockMem for C memory (kmp.TargetLockMem mirrors
// llvm_omp_target_lock_mem): each keeps the registry, its pools and the
// kernel in agreement, so that nothing can unlock memory an allocator still
// counts as pinned.
//
// One registry per device records host ranges [host, host+size), the
// address the device uses for host, a kind, and two reference counts: Lock
// references (llvm_omp_target_lock_mem) and mapped references (locks taken
// implicitly while a buffer is mapped for a transfer,
// LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS). Entries never overlap: a range
// partly overlapping one is refused with target.ErrOverlap, changing nothing.
// Lock references and mapped references are counted apart, so an unmap
// never drops a user's explicit lock; memory a part of the runtime holds
// for itself (a pinned allocator's chunks) carries neither, and a user's
// unlock of it is target.ErrNotLocked naming its owner.
package pinned
