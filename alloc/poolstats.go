package alloc

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
)

// A device's pinned pool is shared: every pinned allocator pinning through
// the device takes its blocks from the same locked chunks. So what an
// allocator reports (Stats) is about its own blocks, and what the pool
// holds is reported per pool (ReadPinnedStats().Pools), never mixed.
//
// Trimming is the pool's policy, not the business of whichever allocator
// leaves: while any live allocator draws on the pool it keeps up to
// PoolKeepChunks empty chunks and PoolKeepHuge bytes of freed huge regions
// locked, for the next allocation to reuse without a lock call. When the
// last allocator drawing on it is destroyed, it unlocks all it holds idle.
// Trim unlocks idle memory of every pool at any time.
const (
	PoolKeepChunks = 4         // empty 4 MiB chunks kept locked per heap (16 MiB; per node where the pool has a heap per node)
	PoolKeepHuge   = 256 << 20 // bytes of freed huge regions kept locked per heap (256 MiB)
)

// PinnedPoolStats describes one pinned pool (ReadPinnedStats().Pools).
type PinnedPoolStats struct {
	Device int // the device that locks the pool's memory
	// Bound is nil for the device's own pool; for the pool of pinned
	// allocators on a memory space of some NUMA nodes (high_bw, large_cap,
	// a sub-memory space) it is those nodes, which its chunks are bound to
	// (MPOL_BIND) before they are locked.
	Bound []int

	Locked uintptr // bytes locked for the pool: chunks, huge regions, and chunks waiting for an unlock
	// Idle is the part of Locked kept for reuse with no block in it: empty
	// chunks, freed huge regions (those kept in a P's cache too) and the
	// pages of freed medium blocks. Free slots and medium pages cached per
	// P, for the next allocation on that P, are not counted: Idle is a
	// lower bound.
	Idle uintptr

	Chunks     int // 4 MiB chunks (small and medium blocks)
	IdleChunks int // of which hold no block
	// FreeBlocks counts the pieces kept locked for reuse with no block in
	// them (CuPy's n_free_blocks): idle chunks, freed huge regions and the
	// freed medium blocks kept whole; Trim gives them back.
	FreeBlocks int
	Huge       int     // regions of their own (blocks over 2 MiB), freed ones kept included
	Retained   uintptr // bytes of freed huge regions kept for reuse
	Stuck      int     // chunks the device refused to unlock yet (Trim tries again)
	HugeTLB    uintptr // of Locked, bytes in hugetlb pages (not in VmLck: PinnedStats.HugeTLB)

	Locks    int64         // lock calls made for the pool
	Unlocks  int64         // unlock calls that succeeded
	LockTime time.Duration // time spent in lock and unlock calls

	// Nodes is the pool per NUMA node, ascending: one entry with Node -1
	// for a pool with one heap (a device whose node is known keeps its
	// chunks there: Device's NUMANode), else one per node with CPUs and
	// memory (the host device on a multi-node machine). The fields above
	// are the sums of these.
	Nodes []PinnedNodeStats
	// FarAllocs counts allocations a heap served to a caller of another
	// node because the caller's node's heap could get no memory (the sum
	// of Nodes' FarAllocs).
	FarAllocs int64
	// Failures counts the chunks and huge regions the pool could not get
	// (the pinned-bytes limit, a mapping or a lock refused): the sum of
	// Nodes' Failures.
	Failures int64
}

// PinnedNodeStats is the part of a pinned pool whose chunks prefer one node.
type PinnedNodeStats struct {
	Node       int     // -1: the pool's single heap (the device's node)
	Locked     uintptr // as PinnedPoolStats
	Idle       uintptr
	Chunks     int
	IdleChunks int
	FreeBlocks int
	Huge       int
	Retained   uintptr
	Stuck      int
	HugeTLB    uintptr
	Locks      int64
	Unlocks    int64
	LockTime   time.Duration
	FarAllocs  int64 // allocations this heap served to callers of other nodes
	Failures   int64 // chunks and huge regions the heap could not get (limit, mapping or lock refused)
}

// poolCounts are a pool's lock calls (in its pinSource).
type poolCounts struct {
	locks, unlocks, nanos atomic.Int64
	failures              atomic.Int64 // chunks or regions that could not be had (limit, map, lock)
}

// readPinnedPools returns the pinned pools that exist, one per device that has
// pinned memory for an allocator, and one per device and memory space of
// some NUMA nodes that pinned allocators on high_bw, large_cap or a
// sub-memory space use (PinnedPoolStats.Bound), in device order, a device's own
// pool first.
func readPinnedPools() []PinnedPoolStats {
	pools := pinnedPoolList() // heap.Stats may wait for a release: not under pinnedMu
	out := make([]PinnedPoolStats, 0, len(pools))
	for _, pp := range pools {
		out = append(out, poolStatsLocked(pp))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return numa.FormatList(out[i].Bound) < numa.FormatList(out[j].Bound) // the device's own pool first
	})
	return out
}

// PinnedPool returns the pinned pool of device dev, if it has one.
func readPinnedPool(dev int) (PinnedPoolStats, bool) {
	pinnedMu.Lock()
	pp, ok := pinnedPools[pinKey{dev: dev}]
	pinnedMu.Unlock()
	if !ok {
		return PinnedPoolStats{}, false
	}
	return poolStatsLocked(pp), true
}

// poolStatsLocked reads one pool (its heaps and sources never change, so
// pinnedMu need not be held).
func poolStatsLocked(pp *pinnedPool) PinnedPoolStats {
	st := PinnedPoolStats{Device: pp.dev, Bound: slices.Clone(pp.bound)}
	for i, h := range pp.heaps {
		hs := h.Stats()
		src := pp.srcs[i]
		stuckB, stuckN := src.stuckBytes()
		n := PinnedNodeStats{
			Node:       pp.nodes[i],
			Locked:     hs.Mapped + stuckB,
			Idle:       uintptr(hs.EmptyChunks)*heap.ChunkSize + hs.Retained + hs.Spare,
			Chunks:     hs.Chunks,
			IdleChunks: hs.EmptyChunks,
			FreeBlocks: hs.FreeBlocks,
			Huge:       hs.Huge,
			Retained:   hs.Retained,
			Stuck:      stuckN,
			HugeTLB:    hugeTLBBytes(src),
			Locks:      src.counts.locks.Load(),
			Unlocks:    src.counts.unlocks.Load(),
			LockTime:   time.Duration(src.counts.nanos.Load()),
			FarAllocs:  pp.far[i].Load(),
			Failures:   src.counts.failures.Load(),
		}
		st.Locked += n.Locked
		st.Idle += n.Idle
		st.Chunks += n.Chunks
		st.IdleChunks += n.IdleChunks
		st.FreeBlocks += n.FreeBlocks
		st.Huge += n.Huge
		st.Retained += n.Retained
		st.Stuck += n.Stuck
		st.HugeTLB += n.HugeTLB
		st.Locks += n.Locks
		st.Unlocks += n.Unlocks
		st.LockTime += n.LockTime
		st.FarAllocs += n.FarAllocs
		st.Failures += n.Failures
		st.Nodes = append(st.Nodes, n)
	}
	return st
}

// isPinnedHeap reports whether h is a heap of a device's pinned pool (not
// the shared host heap, nor a NUMA-placed one). The answer for a heap never
// changes, so it is cached (pinned heaps from their making: newPinnedPool):
// Inspect, and so every ArrowAllocator.Free, asks without a lock.
func isPinnedHeap(h *heap.Heap) bool {
	if h == nil {
		return false
	}
	if v, ok := pinnedHeapSet.Load(h); ok {
		return v.(bool)
	}
	pinnedMu.Lock()
	is := false
	for _, pp := range pinnedPools {
		is = is || pp.has(h)
	}
	pinnedMu.Unlock()
	pinnedHeapSet.Store(h, is) // the cache keeps h alive: its pointer is never another heap's
	return is
}

var pinnedHeapSet sync.Map // *heap.Heap → bool

// leavePool applies the pool's policy when a, drawing on a pinned pool, is
// destroyed: the pool gives back its idle memory only if no other live
// allocator draws on it.
func (a *Allocator) leavePool() {
	if !isPinnedHeap(a.heap) {
		return
	}
	shared := false
	allocators(func(b *Allocator) {
		shared = shared || b != a && b.heap == a.heap && !b.head.Destroyed.Load()
	})
	if shared {
		return
	}
	if a.pool != nil {
		for _, h := range a.pool.heaps {
			h.Trim() // a chunk the device refuses to unlock waits for Trim
		}
		return
	}
	a.heap.Trim() // a chunk the device refuses to unlock waits for Trim
}
