package heap

// Free huge regions kept per P (issue 30 item 3): a loop that allocates
// and frees a big buffer takes its region back from the P's cache, in one
// pinned section that also counts the block in the owner's tally, with no
// heap mutex, no second pin and no atomic instruction beyond the span
// state's (publish at allocation, the compare-and-swap at Free that two
// racing frees decide on).
//
// What a cached region is. It is idle memory, exactly as a region on the
// central list (h.huge): state retained, mapped (and for a pinned heap
// locked and registered). Stats counts every region whose state is
// retained (its atomic load, over h.regions, every region the heap holds),
// wherever it is kept: a Free that returned has stored it, an allocation
// that returned has stored large. So Huge, Retained and FreeBlocks, and
// PinnedPoolStats.Idle, cover cached regions at every moment a caller looks.
//
// KeepHuge bounds what the central list and every P's cache keep
// together. h.kept is the budget handed out: the central list's bytes,
// plus, for each P, the bytes it keeps and its credit (pcache.credit). A P
// that takes a region for a block keeps its size as credit, and a P that
// keeps a freed region pays from its credit first: a loop of big buffers on
// one P reserves once and then never touches the shared word. A P short of
// credit reserves the difference (a compare-and-swap loop that never lets
// h.kept pass KeepHuge); when that fails it gives its credit back and, if
// still short, moves its own regions to the central list, where
// keepOrFree releases the oldest to make room (freeHugeRare). Credit
// stranded on a P that stopped using huge blocks returns at Trim.
//
// Who touches a P's cache. Only the goroutine pinned to the P, holding its
// guard (as for the small lists: plain loads and stores, no lock), and
// Trim, which takes the caches whole after a grace period (trim.go). A
// region leaves a cache only there; it is handed to one allocation (the
// pinned section that removes it from the cache) or released by the trim
// that owns the cache, never both: a region is never handed out twice.
//
// Placement. Every heap has its own caches (a per-node heap, a NUMA
// placement's heap, a pinned pool's heap), so a region cached by a P is
// only ever reused by an allocation from the heap that mapped it: a
// node's memory never serves another node's allocation.
//
// Giving it back. Trim (and so alloc.Trim, the destruction
// of the last allocator on a pinned pool, Close) drains every P's cache.
// When the source refuses a chunk or region (a pinned-bytes limit reached)
// while regions are kept idle, the heap trims and asks again (giveIdle):
// a region kept on one P must not make an allocation on another fail.

import (
	"sync/atomic"
	"time"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// hugePerP is how many free huge regions a P keeps: the buffers a loop on
// one P alternates between. More go to the central list.
const hugePerP = 2

// reserveKept adds n bytes to the budget handed out (h.kept), unless that
// would take it above keep. A compare-and-swap loop, so it never reads
// above keep, not even for an instant.
func (h *Heap) reserveKept(n, keep uintptr) bool {
	for {
		v := h.kept.Load()
		if v+n > keep {
			return false
		}
		if h.kept.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// unreserveKept gives n bytes of budget back.
func (h *Heap) unreserveKept(n uintptr) { h.kept.Add(-n) }

// fitsHuge says whether a kept region s may serve a block of foot bytes
// aligned to align: big enough, wasting at most a quarter (large blocks
// are never rounded to powers of two), and aligned.
func fitsHuge(s *span, foot, align uintptr) bool {
	return s.size >= foot && s.size-foot <= foot/4 && s.base&(align-1) == 0
}

// countRare counts a block the pinned section could not (the P has no
// tally shard yet), or samples the peak it passed.
//
//go:noinline
func countRare(t *Tally, alloc, counted bool, bytes, foot int64) {
	if !counted {
		t.count(alloc, bytes, foot)
	} else {
		t.SamplePeak()
	}
}

// takeFit removes and returns a region of the cache that fits foot bytes
// aligned to align, or nil, and keeps its size as the P's credit (its
// budget stays with the P, for the block's free). The newest region of the
// exact size (a loop's own buffer) is found inline. The caller holds pc's
// guard.
func (pc *pcache) takeFit(foot, align uintptr) *span {
	i := pc.nregions - 1
	if uint(i) < hugePerP {
		if s := pc.regions[i]; s.size == foot && s.base&(align-1) == 0 {
			pc.regions[i] = nil
			pc.nregions = i
			pc.credit += s.size
			pc.took = min(pc.took+1, hugePerP)
			return s
		}
	}
	return pc.takeFitSlow(foot, align)
}

// takeFitSlow is takeFit beyond the newest region.
func (pc *pcache) takeFitSlow(foot, align uintptr) *span {
	i := pc.fitRegion(foot, align)
	if i < 0 {
		return nil
	}
	s := pc.takeRegion(i)
	pc.credit += s.size
	pc.took = min(pc.took+1, hugePerP)
	return s
}

// allocRegionGuarded is AllocGuarded for a huge block: a region of the P's
// cache, taken and counted in t in one pinned section that also reads the
// owner's closed flag, with no in-flight mark (as Fast.Alloc: a closer sets
// the flag, then waits out a grace period, pcpu.Quiesce, which no pinned
// section spans; see Fast.Alloc). ok false (no region fits, a P without a
// cache or tally shard yet) means nothing was done; refused: closed was
// set.
func (h *Heap) allocRegionGuarded(size, align uintptr, owner uint32, zero bool, t *Tally, closed *atomic.Bool) (p, footprint uintptr, ok, refused bool) {
	foot := roundUp(max(size, 1), pageSize)
	if h.sizer != nil {
		foot = max(foot, h.sizer.RegionSize(foot))
	}
	pid := pcpu.Pin()
	cs, ts := *h.caches.Load(), *t.shards.Load()
	if pid >= len(cs) || pid >= len(ts) || closed.Load() || h.draining.Load() {
		pcpu.Unpin()
		return 0, 0, false, closed.Load()
	}
	pc := cs[pid]
	pc.guard.Lock()
	s := pc.takeFit(foot, align)
	if s == nil {
		pc.guard.Unlock()
		pcpu.Unpin()
		return 0, 0, false, false
	}
	foot = s.size + descSize
	_, sample := t.countPinned(pid, true, int64(size), int64(foot)) // pid has a shard
	pc.guard.Unlock()
	pcpu.Unpin()
	s.owner, s.req = owner, size
	publish(&s.state, spanLarge)
	if zero {
		h.zeroBlock(s.base, size)
	}
	if sample {
		t.SamplePeak()
	}
	sampleAsk(s.base, size, owner) // not counted down: the profile's own countdown
	return s.base, foot, true, false
}

// fitRegion returns the index of a region of the cache that fits foot
// bytes aligned to align (fitsHuge): the newest of the exact size, else the
// smallest that fits; -1 for none. The caller holds pc's guard.
func (pc *pcache) fitRegion(foot, align uintptr) int {
	best := -1
	for i := min(pc.nregions, hugePerP) - 1; i >= 0; i-- {
		r := pc.regions[i]
		if r.size == foot && r.base&(align-1) == 0 {
			return i // a loop's own buffer: the common case
		}
		if fitsHuge(r, foot, align) && (best < 0 || r.size < pc.regions[best].size) {
			best = i
		}
	}
	return best
}

// takeRegion removes and returns the cache's region i, keeping the rest
// oldest first. The caller holds pc's guard.
func (pc *pcache) takeRegion(i int) *span {
	s := pc.regions[i]
	n := min(pc.nregions, hugePerP)
	for j := i + 1; j < n; j++ {
		pc.regions[j-1] = pc.regions[j]
	}
	pc.nregions = n - 1
	pc.regions[n-1] = nil
	return s
}

// freeRegion is FreeFast for a pointer whose granule maps to no chunk (ch
// nil) or to a huge region's: the region's own start is freed here, in the
// pinned section FreeFast began (the state's compare-and-swap, the count
// and the P's cache: freeHuge), and the owner's follow-up flags read after
// it, as FreeFast does; anything else goes to freeOther. It unpins.
//
//go:noinline
func freeRegion(pid int, ch *chunk, p uintptr) error {
	if ch == nil || p != ch.base {
		return freeOther(pid, ch, p) // unpins
	}
	s := ch.huge
	// The state change decides which of two racing frees wins; a loser
	// must not try again (the region may be another block's by then).
	if !s.state.CompareAndSwap(spanLarge, spanRetained) {
		st := s.state.Load()
		pcpu.Unpin()
		if st == spanRetained || st == spanDead {
			return freeFollow(p, nil, 0, doubleFree(p))
		}
		return freeFollow(p, nil, 0, invalid(p))
	}
	b := Block{Heap: ch.heap, Owner: s.owner, Size: s.req, Footprint: s.size + descSize}
	t := tallyOf(b.Owner)          // before the block is counted out (see FreeCounted)
	ch.heap.freeHuge(pid, s, b, t) // unpins
	if t != nil && t.follow.Load() != 0 {
		return freeFollow(p, t, b.Footprint, nil)
	}
	return nil
}

// freeHuge is freeLarge for a huge region s whose state it set retained:
// kept in P pid's cache, when the P has served a huge block it has not kept
// a region for yet (pcache.took), the cache has room and the P's credit
// covers it; else kept centrally or released (freeHugeRare). b is counted
// out of t in the pinned section the caller began, either way. It unpins.
func (h *Heap) freeHuge(pid int, s *span, b Block, t *Tally) {
	cs := *h.caches.Load()
	// closed after the caches' load: a Close stores it before it installs
	// fresh caches (trim), and sync/atomic is sequentially consistent, so
	// a section that loaded the fresh caches sees it set; a region is never
	// cached where no trim will look again.
	if pid >= len(cs) || h.closed.Load() || h.draining.Load() {
		counted := t == nil || countOut(pid, b, t)
		pcpu.Unpin()
		h.freeHugeCentral(s, b, t, counted, nil)
		return
	}
	pc := cs[pid]
	pc.guard.Lock()
	if pc.took == 0 || pc.nregions >= hugePerP || pc.credit < s.size {
		h.freeHugeRare(pc, pid, s, b, t) // unlocks, unpins
		return
	}
	pc.took--
	pc.credit -= s.size
	pc.regions[pc.nregions] = s
	pc.nregions++
	counted := t == nil || countOut(pid, b, t)
	pc.guard.Unlock()
	pcpu.Unpin()
	if !counted {
		countRare(t, false, false, int64(b.Size), int64(b.Footprint))
	}
}

// countOut counts b out of t on P pid, pinned; false when the P has no
// shard yet (the caller counts it unpinned).
func countOut(pid int, b Block, t *Tally) bool {
	ok, _ := t.countPinned(pid, false, int64(b.Size), int64(b.Footprint))
	return ok
}

// freeHugeRare is freeHuge when the P keeps no region for s: it has served
// no huge block since it last kept one (a P that only frees, the consumer
// of a pipeline, leaves what it frees to the central list, where the
// producer's P finds it), its cache is full, or its credit falls short.
// A full cache's oldest region goes to the central list; a P short of
// credit reserves the difference, and failing that gives its credit back
// and moves all its regions to the central list as the oldest, the first
// keepOrFree releases to make room for s (the region just freed is the
// likeliest to be asked for again: a loop of big buffers). s is cached if
// the P then has the budget, else kept centrally or released. The caller
// is pinned and holds pc's guard; it releases both.
//
//go:noinline
func (h *Heap) freeHugeRare(pc *pcache, pid int, s *span, b Block, t *Tally) {
	var out [hugePerP]*span
	n := 0
	cached := false
	if keep := h.keepHuge.Load(); pc.took > 0 && s.size <= keep {
		if pc.nregions >= hugePerP {
			out[0] = pc.takeRegion(0) // its budget moves to the central list with it
			n = 1
		}
		cached = pc.credit >= s.size || h.reserveKept(s.size-pc.credit, keep)
		if cached {
			pc.credit -= min(pc.credit, s.size)
			pc.took--
			pc.regions[pc.nregions] = s
			pc.nregions++
		} else {
			h.unreserveKept(pc.credit)
			pc.credit = 0
			for pc.nregions > 0 && n < len(out) {
				out[n] = pc.takeRegion(0)
				n++
			}
		}
	}
	counted := t == nil || countOut(pid, b, t)
	pc.guard.Unlock()
	pcpu.Unpin()
	if cached {
		s = nil
	}
	h.freeHugeCentral(s, b, t, counted, out[:n])
}

// freeHugeCentral counts b out of t unless counted, and keeps the freed
// region s (nil: cached already) centrally or releases it, after the
// regions evicted from a P's cache, whose budget they bring (h.kept counts
// them) and which join the central list as its oldest. h.mu not held.
func (h *Heap) freeHugeCentral(s *span, b Block, t *Tally, counted bool, evicted []*span) {
	if !counted {
		t.CountFree(int64(b.Size), int64(b.Footprint))
	}
	if s == nil && len(evicted) == 0 {
		return
	}
	h.mu.Lock()
	if len(evicted) > 0 && h.closed.Load() { // a Close's trim may be done: nothing is kept now
		for _, r := range evicted {
			h.unreserveKept(r.size)
			h.releaseHuge(r)
		}
	} else if len(evicted) > 0 {
		h.huge = append(evicted[:len(evicted):len(evicted)], h.huge...)
	}
	if s != nil && h.othersHold(s.size) {
		h.unlock()
		h.drainCaches()
		h.mu.Lock()
	}
	if s != nil {
		h.keepOrFree(s)
	}
	h.unlock()
}

// othersHold reports whether keeping a region of n bytes needs KeepHuge
// budget that only P caches hold (their regions and credit: a P keeps
// its regions where only it looks, and the goroutine that freed them may
// run on another P now), so that drainCaches should bring it back first
// rather than the region just freed be released. At most one drain per
// drainGap, so that Ps fighting over too small a budget do not stop the
// world at every free. h.mu held.
func (h *Heap) othersHold(n uintptr) bool {
	keep := h.keepHuge.Load()
	kept := h.kept.Load()
	if n > keep || kept+n <= keep || h.closed.Load() {
		return false
	}
	var central uintptr
	for _, r := range h.huge {
		central += r.size
	}
	last := h.lastDrain.Load() // 0: never
	return kept > central && (last == 0 || nanotime()-last > drainGap)
}

// drainGap spaces drainCaches out (see othersHold).
const drainGap = 10e6 // 10 ms

// drainCaches moves every P's regions to the central list (as its oldest)
// and gives their credit back, without a garbage collection: it sets
// draining, which the pinned sections read before they touch a P's regions
// (then they leave them alone and take the central path), and waits out a
// grace period (pcpu.Quiesce), after which no section that missed the flag
// is still running; the caches' regions are then its own until it clears
// the flag, whose atomic store publishes what it wrote to the next section
// that loads it. h.mu not held, not pinned.
func (h *Heap) drainCaches() {
	h.drainMu.Lock()
	defer h.drainMu.Unlock()
	h.lastDrain.Store(nanotime() | 1)
	h.draining.Store(true)
	defer h.draining.Store(false)
	pcpu.Quiesce()
	var moved []*span
	var credit uintptr
	for _, pc := range *h.caches.Load() {
		var out [hugePerP]*span
		pcpu.Pin() // guards are held only while pinned (see pcpu.Guard)
		pc.guard.Lock()
		n := copy(out[:], pc.regions[:pc.nregions])
		credit += pc.credit
		clear(pc.regions[:])
		pc.nregions, pc.credit = 0, 0
		pc.guard.Unlock()
		pcpu.Unpin()
		moved = append(moved, out[:n]...)
	}
	h.unreserveKept(credit)
	h.mu.Lock()
	if h.closed.Load() {
		for _, r := range moved {
			h.unreserveKept(r.size)
			h.releaseHuge(r)
		}
	} else {
		h.huge = append(moved, h.huge...)
	}
	h.unlock()
}

// noteTook records, on the current P, a huge block served without its
// cache (the central list, a new region): the P may keep a region for it
// when it is freed there (pcache.took).
func (h *Heap) noteTook() {
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		pc.took = min(pc.took+1, hugePerP)
		pc.guard.Unlock()
	}
	pcpu.Unpin()
}

// drainRegions gives the regions of a cache Trim took (after its grace
// period) back to the source, and its budget back. h.mu held.
func (h *Heap) drainRegions(pc *pcache) {
	n := pc.credit
	for _, s := range pc.regions[:pc.nregions] {
		n += s.size
		h.releaseHuge(s)
	}
	h.unreserveKept(n)
	clear(pc.regions[:])
	pc.nregions, pc.credit, pc.took = 0, 0, 0
}

// giveIdle is what an allocation does when the source refused it memory
// (a pinned-bytes limit, the memory cgroup) while the heap keeps memory
// idle: regions in P caches or on the central list, or chunks on their way
// back. It gives them back (a Trim, for idle kept memory: a grace period)
// and reports whether asking the source again may succeed. h.mu not held.
func (h *Heap) giveIdle() bool {
	h.mu.Lock()
	inFlight := h.relChunks+h.relHuge > 0
	h.mu.Unlock()
	if h.kept.Load() > 0 {
		h.Trim()
		return true
	}
	if inFlight {
		h.WaitReleases()
	}
	return inFlight
}

// idleHuge returns the bytes and number of the huge regions kept free, in
// P caches or the central list: those whose state is retained. h.mu held.
func (h *Heap) idleHuge() (bytes uintptr, n int) {
	for s := range h.regions {
		if s.state.Load() == spanRetained {
			bytes += s.size
			n++
		}
	}
	return bytes, n
}

// nanotime is a monotonic clock reading in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()
