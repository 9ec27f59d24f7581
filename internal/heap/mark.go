//go:build !race

package heap

import "sync/atomic"

// addMark adds d to the in-flight count of the P's own shard (Enter, Exit
// and AllocGuarded where pcpu.HasBarrier). Only the goroutine pinned to
// the P writes the shard (as with sync.Pool's per-P private slot), so a
// load and an atomic store make the add. The store is a sync/atomic
// operation, like the load of the closed flag after the mark and the
// closer's store of the flag and loads of the marks: all sequentially
// consistent by Go's memory model, so the store-then-load handshake holds
// without a barrier, whatever the compiler or an arm64 core would reorder
// around plain stores; and the unmark publishes the counts the P stored
// before it to the closer that loads it. It costs a store-release (STLR)
// on arm64 and an XCHG on amd64 (2-3 ns per guarded alloc+free, measured).
// See ARCHITECTURE.md, "The in-flight protocol".
func addMark(p *int64, d int64) { atomic.StoreInt64(p, *p+d) }
