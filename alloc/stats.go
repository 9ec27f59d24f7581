package alloc

import (
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/target"
)

// Stats describes one allocator's own use: the blocks it served. A block
// its fallback served counts in the fallback's Stats (and in Fallbacks
// here). What a shared pinned pool holds, locks and keeps idle is the
// pool's, reported per pool in ReadPinnedStats().Pools, never here.
type Stats struct {
	Allocs, Frees uint64 // blocks allocated and freed
	BlocksLive    int64  // Allocs - Frees
	BytesLive     int64  // bytes of live blocks, as asked (or as last resized)
	FootprintLive int64  // bytes the live blocks occupy (headers, padding, whole pages)
	PeakBytes     int64  // highest BytesLive seen (sampled every 64 KiB of growth per P)
	// PinnedBytes is the bytes of live blocks in page-locked memory: all of
	// BytesLive for an allocator whose memory is pinned (a pinned pool, or
	// target host memory a GPU driver allocated pinned), else 0.
	PinnedBytes int64
	Fallbacks   uint64  // allocations passed on to the fallback
	Failures    uint64  // allocations that returned an error (after the fallback had its turn) or ended in abort_fb's panic
	PoolSize    uintptr // the pool_size trait (0: none)
	PoolUsed    int64   // footprint counted against PoolSize
}

// shards are the allocator's counters: a tally of the heap package, kept
// per P, which the heap itself updates on Alloc and Free (the same pinned
// section that takes or caches the block) and which is summed when read.
type shards struct {
	t        *heap.Tally
	failures atomic.Uint64 // rare: one shared counter is enough
}

func (ss *shards) init() { ss.t = heap.NewTally() }

// count counts an allocation (bytes >= 0) or a free (bytes < 0) made
// outside the heap (target memory).
func (a *Allocator) count(bytes, foot int64) {
	if bytes >= 0 {
		a.shards.t.CountAlloc(bytes, foot)
	} else {
		a.shards.t.CountFree(-bytes, -foot)
	}
}

func (a *Allocator) fallbackTaken() { a.shards.t.Fallback() }

func (ss *shards) sum() (st Stats) {
	t := ss.t.Sum()
	st.Allocs, st.Frees, st.BytesLive, st.FootprintLive, st.Fallbacks = t.Allocs, t.Frees, t.Bytes, t.Foot, t.Fallbacks
	st.BlocksLive = t.Live()
	return st
}

func (ss *shards) live() int64 { return ss.t.Sum().Live() }

func (a *Allocator) samplePeak() { a.shards.t.SamplePeak() }

// Stats returns a snapshot of the allocator's counters.
func (a *Allocator) Stats() Stats {
	a.samplePeak()
	st := a.shards.sum()
	st.PeakBytes = a.shards.t.Peak()
	st.PoolSize = a.traits.PoolSize
	st.PoolUsed = a.poolUsed.Load()
	st.Failures = a.shards.failures.Load()
	if a.pinnedMemory() {
		st.PinnedBytes = st.BytesLive
	}
	return st
}

// failed counts an allocation that ends in an error.
func (a *Allocator) failed(p unsafe.Pointer, err error) (unsafe.Pointer, error) {
	if err != nil {
		a.shards.failures.Add(1)
	}
	return p, err
}

// pinnedMemory reports whether the allocator's blocks are page-locked.
func (a *Allocator) pinnedMemory() bool {
	if a.target != nil {
		if a.target.kind != target.MemHost {
			return false
		}
		dev := a.target.dev
		if dev < 0 {
			dev = target.DefaultDevice()
		}
		d, err := target.Get(dev)
		return err == nil && !d.IsHost()
	}
	return isPinnedHeap(a.heap)
}
