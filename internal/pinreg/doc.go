// Package pinreg is the per-device registry of page-locked host memory
// that target keeps for every device: LLVM offload's PinnedAllocationMapTy
// with its semantics, without its defects, and with a lock-free hot path.
//
// It is internal so that nothing outside this module can take or drop a
// reference behind the runtime's back: a user reads a device's registry
// through target.Device.Registry, a read-only view, and its answers are
// package pinned's types (EntryInfo, Kind, Stats, the error sentinels).
// Locking goes through target (Device.LockMem and UnlockMem,
// kmp.TargetLockMem, target.Pin) or a pinned allocator (alloc.WithPinned),
// which keep the registry, their pools and the kernel in agreement.
//
// # What it records
//
// One Registry per device. Each entry is a host range [host, host+size), the
// address the device uses for host, a kind, and two reference counts: Lock
// references (llvm_omp_target_lock_mem) and mapped references (locks taken
// implicitly when a buffer is mapped for transfers,
// LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS). Entries never overlap.
//
// # Entry state machine
//
//	absent --Lock/LockMapped, no entry, Locker.LockHost ok--> locked(refs=1)
//	absent --Lock/LockMapped, Locker.ExternalLock says locked--> external(refs=1)
//	absent --Register--> registered(refs=0)
//	absent --Hold, Locker.LockHost ok--> held (locked, refs=0, owner named)
//	any live --Lock/LockMapped contained in it--> same state, refs+1 (no driver call)
//	locked/external --Unlock/UnlockUnmapped, refs>1--> refs-1
//	locked --last reference dropped--> absent, after Locker.UnlockHost
//	external --last reference dropped--> absent (never unlocked by us)
//	registered --Unregister, no Lock or mapped refs--> absent (never unlocked by us)
//	registered --Unregister with refs--> unchanged, ErrBusy
//	held --Release--> absent, after Locker.UnlockHost, Lock and mapped refs dropped and counted
//	locked/held --Locker.UnlockHost fails with ErrStillLocked--> unchanged, the error returned
//
// Hold is for memory a part of this runtime mapped for itself (the pinned
// heaps' chunks). Its reference is not a Lock reference: Unlock and
// UnlockUnmapped never drop it, and refusing them names the owner, so a
// user who unlocks memory they never locked cannot unpin a chunk other
// blocks rely on. Release drops the user references left inside, so that
// no entry outlives the memory.
//
// Lock references and mapped references are counted apart: Unlock drops
// only the former, UnlockUnmapped only the latter, so an unmap can never eat
// a user's explicit lock. An entry lives while either count is above zero
// or, for a registered entry, until Unregister.
//
// A range that partly overlaps entries (runs past an entry's end, starts
// before one and reaches into it, or spans several) is refused with
// ErrOverlap in every build, before the Locker is called, so no stray lock
// is left behind. LLVM checks this only in debug builds, and inserts first.
// A failing LockHost inserts nothing.
//
// Memory the device reports as locked outside this runtime (ExternalLock)
// is recorded with the external range the device reports, so later locks
// anywhere in it are hits; if part of that range is already an entry, only
// the requested range is recorded.
//
// # Mapped buffers
//
// LockMapped and UnlockUnmapped follow MapMode (ParseMapMode reads the
// values of LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS). MapOn ignores failures:
// the transfer takes the pageable path. MapMandatory returns them. MapOff
// locks nothing and takes no reference, but LockMapped still returns the
// device address of a range already inside an entry (pinned by the user or
// allocated pinned by the device), so transfers from it use the pinned
// path; it takes no reference because with locking off nothing will drop
// one (UnlockUnmapped with MapOff does nothing), as in LLVM. Keeping the
// memory pinned while it is mapped is then the user's business, as it is for
// any memory the user unlocks while using it. Callers call UnlockUnmapped
// exactly for the LockMapped calls that returned locked=true.
//
// When Locker.UnlockHost fails on the last reference with an error wrapping
// ErrStillLocked (the memory is locked exactly as before: munlock refused at
// vm.max_map_count), the entry and its references stay and the unlock can
// be retried. On any other failure the entry is erased anyway and the error
// returned. Keeping it would leave an entry that nobody
// references and nobody will unlock (LLVM does that): every later lock in
// the range would hit it and skip the driver, though the driver's state is
// unknown. Erasing keeps the registry equal to "what callers hold", and the
// next Lock asks the driver afresh.
//
// # Concurrency
//
// Writers (anything that inserts or erases an entry, and every Locker call)
// serialize on a mutex and keep the source of truth, a github.com/google/btree
// ordered by host start. Readers never take that mutex: they walk a page
// table, a radix tree over 4 KiB page numbers (as UCX's registration cache
// does), with atomic loads, then re-check the range of what they found. Its
// cost does not depend on how many entries exist. Fully covered pages (and
// whole aligned 2 MiB, 1 GiB... spans) point straight at their entry; a page
// shared by several small entries points at a small immutable list. A small
// table of hints leads straight to the last inner node of a 1 GiB region, so
// a find is usually three dependent loads and then the entry: short enough
// that the CPU overlaps the cache misses of consecutive calls.
//
// Each entry is 32 bytes: host, end, device address, and one atomic word
// holding the mapped count and the Lock count (24 bits each: more than
// 16,777,215 simultaneous references of one kind is ErrBusy), the registered
// bit, the kind, and a 13-bit count of recent hits, folded into the
// registry's total under the mutex before it overflows, so that counting
// hits costs no second atomic instruction. A lock that hits an entry adds a
// reference and a hit with one CAS, which fails once
// the live bits are 0: they reach 0 only under the mutex, in the same
// critical section that erases the entry, so a hit can never revive a dying
// entry; it falls back to the mutex and finds the truth in the tree. An
// unlock that is not the entry's last reference is a CAS too; the last one
// goes through the mutex. Locker calls run without the mutex, with their
// range (page-rounded) in flight: a writer whose range shares a page with a
// flight waits for it to land, which keeps the Locker's unlock ordered
// before any new lock of the same pages and never shows two overlapping
// calls to the Locker at once; writers of other ranges go on.
//
// So Lookup, IsPinned, Entry and every lock or unlock that does not create
// or erase an entry run without a lock and do not depend on the number of
// entries. Lookup writes nothing (Stats.Hits counts lock hits, not lookups:
// a shared counter would turn every transfer's read into a contended write).
// A slow driver lock or unlock delays only writers of its own pages (and
// Stats, Each, Dump and HeldStats, which wait for every flight so that what
// they report agrees with the device), never hits, lookups or other ranges.
// Stats visits every entry.
//
// Memory: 32 bytes and a btree item per entry; the page table adds a 4 KiB
// leaf per 2 MiB of address space holding entries' boundaries or small
// entries, and 12 KiB per inner node (a few per registry). Large ranges cost
// a few hundred slots whatever their size. Empty nodes are freed.
//
// Benchmarks against LLVM (same machine, same run): bench/registry/run.sh.
package pinreg
