// Package heap is the allocation engine under every allocator: it carves
// memory obtained from a Source (libc mappings, or page-locked mappings for
// pinned allocators) into blocks, with no per-allocation call into C.
//
// Layout. Memory comes in 4 MiB chunks aligned to 4 MiB; a process-wide
// radix table maps each 4 MiB granule to its chunk, so Free recognises our
// pointers (and rejects foreign ones) without touching foreign memory. A
// chunk is 64 pages of 64 KiB. Small blocks (slot ≤ 32 KiB) live in spans of
// one size class; medium blocks (≤ 2 MiB) own a run of pages; huge blocks
// own a region of their own, registered in the table for every granule.
//
// Small blocks carry an 8-byte header just before the user pointer:
// {magic|offset, owner|size}, 16 bits each. The magic says live or free;
// Free flips it, checking the offset in the same compare-and-swap, so a double free is seen even when two
// goroutines race. Large blocks have no header: their span says it all.
//
// Speed. Each P has a cache of free slots per class that the goroutine
// running on it uses while pinned (runtime.procPin, as sync.Pool does), with
// no lock and no shared cache line; caches refill and spill in batches from
// the central lists under the heap's mutex. Trim drains the caches and gives
// empty chunks back to the source.
//
// Stale pointers. Free validates a small block (lookup, header check and
// swap) pinned, and a chunk leaves the table before it goes back to the
// source only after a stop-the-world (giveback.go): a double free racing
// the release of its chunk never reads unmapped memory.
//
// Partial chunks. A PartialSource (a pinned heap under a limit below a
// chunk) makes only some pages of a chunk usable; small blocks of every
// class share those pages first fit (mixed.go), so a 64 KiB limit serves
// blocks of several sizes instead of one class's span.
//
// Zeroed requests clear only memory that may hold old bytes: slots and
// pages never used since the source handed them over are zero already.
//
// Span life: a span is made from free pages (dead → small/large); a small
// span returns its pages when every slot is back in its central list; a
// large span returns them at Free; a huge region is either released at
// Free or retained (state retained) for reuse when the heap keeps such
// regions, in the freeing P's cache or the central list (hugecache.go),
// until Trim.
package heap
