// Package handles is the table from allocator handles to allocators, out of
// the API: alloc fills it, and kmp's omp_alloc resolves a handle through
// Live, which inlines into its hot path (an exported alloc function would
// have been plumbing in alloc's API; its lookup, with its slow path, is too big
// to inline).
//
// An entry is the Head every alloc.Allocator starts with (its first field,
// at offset 0), so the pointer Live returns is the allocator's. Readers
// index the published table without a lock: Publish stores a new copy with
// an atomic store after every field of its entries was set (copy on write),
// so by Go's memory model a reader that loads it sees them, on every
// architecture; Destroyed is an atomic.Bool, set once.
package handles
