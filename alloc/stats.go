package alloc

import (
	"runtime"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/pcpu"
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

// shard is one P's counters. Only the goroutine pinned to the P writes it.
type shard struct {
	guard     pcpu.Guard
	allocs    uint64
	frees     uint64
	bytes     int64
	foot      int64
	fallbacks uint64
	mark      int64 // bytes when the peak was last sampled
	_         [64]byte
}

type shards struct{ s atomic.Pointer[[]*shard] }

func (ss *shards) init() {
	s := make([]*shard, runtime.GOMAXPROCS(0))
	for i := range s {
		s[i] = new(shard)
	}
	ss.s.Store(&s)
}

const peakStep = 64 << 10

// add counts an allocation (n > 0) or a free (n < 0) of bytes/foot. It
// reports whether the peak should be sampled.
func (a *Allocator) count(bytes, foot int64) {
	sample := false
	pid := pcpu.Pin()
	if s := *a.shards.s.Load(); pid < len(s) {
		sh := s[pid]
		sh.guard.Lock()
		if bytes >= 0 {
			sh.allocs++
		} else {
			sh.frees++
		}
		sh.bytes += bytes
		sh.foot += foot
		if sh.bytes > sh.mark+peakStep {
			sh.mark = sh.bytes
			sample = true
		}
		sh.guard.Unlock()
		pcpu.Unpin()
	} else {
		pcpu.Unpin()
		a.shards.grow()
		a.count(bytes, foot)
		return
	}
	if sample {
		a.samplePeak()
	}
}

func (ss *shards) grow() {
	old := *ss.s.Load()
	n := runtime.GOMAXPROCS(0)
	if n <= len(old) {
		return
	}
	s := make([]*shard, n)
	copy(s, old)
	for i := len(old); i < n; i++ {
		s[i] = new(shard)
	}
	ss.s.CompareAndSwap(&old, &s) // losing the race is fine: the winner grew it
}

func (a *Allocator) fallbackTaken() {
	pid := pcpu.Pin()
	if s := *a.shards.s.Load(); pid < len(s) {
		s[pid].guard.Lock()
		s[pid].fallbacks++
		s[pid].guard.Unlock()
	}
	pcpu.Unpin()
}

func (ss *shards) sum() (st Stats) {
	for _, sh := range *ss.s.Load() {
		pcpu.Pin() // guards are held only while pinned (see pcpu.Guard)
		sh.guard.Lock()
		st.Allocs += sh.allocs
		st.Frees += sh.frees
		st.BytesLive += sh.bytes
		st.FootprintLive += sh.foot
		st.Fallbacks += sh.fallbacks
		sh.guard.Unlock()
		pcpu.Unpin()
	}
	st.BlocksLive = int64(st.Allocs - st.Frees)
	return st
}

func (ss *shards) live() int64 { return ss.sum().BlocksLive }

func (a *Allocator) samplePeak() {
	b := a.shards.sum().BytesLive
	for {
		p := a.peak.Load()
		if b <= p || a.peak.CompareAndSwap(p, b) {
			return
		}
	}
}

// Stats returns a snapshot of the allocator's counters.
func (a *Allocator) Stats() Stats {
	a.samplePeak()
	st := a.shards.sum()
	st.PeakBytes = a.peak.Load()
	st.PoolSize = a.traits.PoolSize
	st.PoolUsed = a.poolUsed.Load()
	if a.traits.Pinned && a.heap != nil {
		hs := a.heap.Stats()
		st.PinnedBytes, st.PinnedChunks = hs.Mapped, hs.Chunks
	}
	return st
}
