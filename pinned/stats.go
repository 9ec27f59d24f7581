package pinned

// Stats is a snapshot of a registry's counters.
type Stats struct {
	Entries         int
	LockedBytes     uintptr // bytes in entries this registry locked through the Locker
	ExternalBytes   uintptr // bytes in entries found locked outside this runtime
	RegisteredBytes uintptr // bytes in entries recorded by Register
	Hits            uint64  // Lock/LockMapped requests served by an existing entry
	Misses          uint64  // Lock/LockMapped requests that needed a new entry
	Overlaps        uint64  // requests refused with target.ErrOverlap
	VendorLocks     uint64  // successful Locker.LockHost calls
	VendorUnlocks   uint64  // Locker.UnlockHost calls
	LockFailures    uint64  // failed Locker.LockHost or ExternalLock calls
	UnlockFailures  uint64  // failed Locker.UnlockHost calls
	// HeldEntries and HeldBytes are the entries a part of the runtime holds
	// for itself (a pinned allocator's chunks; Registry.Held says whose)
	// and their bytes.
	HeldEntries int
	HeldBytes   uintptr
}
