package alloc

import (
	"github.com/ompalloc/ompalloc/internal/heap"
)

// Stats describes an allocator's use.
type Stats struct {
	Allocs, Frees uint64 // blocks allocated and freed
	BlocksLive    int64  // Allocs - Frees
	BytesLive     int64  // requested bytes of live blocks
	FootprintLive int64  // bytes the live blocks occupy
	PeakBytes     int64  // highest BytesLive seen (sampled every 64 KiB of growth per P)
	Fallbacks     uint64 // allocations that went to the fallback
	PoolSize      uintptr
	PoolUsed      int64   // footprint counted against PoolSize
	PinnedBytes   uintptr // bytes locked by this allocator's pinned heap (shared per device)
	PinnedChunks  int
}

// shards are the allocator's counters: a tally of the heap package, kept
// per P, which the heap itself updates on Alloc and Free (the same pinned
// section that takes or caches the block) and which is summed when read.
type shards struct{ t *heap.Tally }

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
	if a.traits.Pinned && a.heap != nil {
		st.PinnedBytes, st.PinnedChunks = pinnedHeapStats(a.heap)
	}
	return st
}
