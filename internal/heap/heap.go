package heap

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

const (
	pageShift     = 16
	pageSize      = 1 << pageShift
	pagesPerChunk = chunkSize / pageSize // 64: one uint64 bitmap per chunk
	maxMedium     = chunkSize / 2        // larger blocks get a region of their own
	maxAlloc      = 1 << 46              // refuse sizes no machine can back
)

// Errors; test with errors.Is.
var (
	ErrForeign    = errors.New("pointer was not allocated by this runtime")
	ErrInvalid    = errors.New("pointer is inside a block, not at its start")
	ErrDoubleFree = errors.New("block already freed")
	ErrTooLarge   = errors.New("size too large")
	ErrNoMemory   = errors.New("out of memory")
	ErrClosed     = errors.New("heap closed")
)

// Source supplies the memory a Heap carves up: plain mappings for ordinary
// heaps, page-locked ones for pinned heaps.
type Source interface {
	// Acquire returns n bytes (a multiple of 64 KiB) aligned to align
	// (a power of two ≥ 4 MiB), zero-filled.
	Acquire(n, align uintptr) (uintptr, error)
	// Release returns memory obtained from Acquire.
	Release(p, n uintptr) error
}

// A PartialSource may serve a chunk of which only the first usable bytes
// (a multiple of 64 KiB, at least 64 KiB) can be handed out: a pinned heap
// under a pinned-bytes limit smaller than a chunk locks no more than it may.
// The rest of the chunk stays reserved and is never used; Release is called
// with the whole chunk. need is what the heap needs of it now: a source that
// cannot make that much usable fails.
type PartialSource interface {
	Source
	AcquireChunk(n, align, need uintptr) (p, usable uintptr, err error)
}

// Config tunes how much free memory a heap keeps instead of returning it.
type Config struct {
	Name       string  // for messages
	KeepChunks int     // empty 4 MiB chunks kept for reuse
	KeepHuge   uintptr // bytes of freed huge regions kept for reuse
}

// Block describes an allocated block.
type Block struct {
	Heap      *Heap
	Owner     uint32  // the id the allocator gave at Alloc
	Size      uintptr // requested size
	Footprint uintptr // bytes of the heap it occupies (slot, pages or region)
	// Four fields at most: the compiler keeps a struct of up to four in
	// registers (SSA); a fifth put every Block in memory and copied it at
	// each call and return of the free path (+46 instructions per 64 B
	// alloc+free, cachegrind). FreeCounted returns the tally beside it.
}

// header sits just before every small block's user pointer: 8 bytes, so
// that a block costs no more than in glibc. Large blocks keep the same facts
// in their span instead, so they have no header.
type header struct {
	// tag is the state (magic, high half) and the user pointer's offset in
	// its slot (low half): written plainly when the block is handed out,
	// swapped atomically by Free, whose one compare-and-swap checks both.
	tag  uint32
	meta uint32 // owner (high half) and requested size (low half; slots are ≤ 32 KiB)
}

const (
	magicLive = 0x4f41 // "AO"
	magicFree = 0x4f46 // "FO"
	maxOwner  = 1<<16 - 1
)

// spanAt returns the span that owns p's page in ch (its huge span, or the
// page's entry), nil for a page no span owns.
func (ch *chunk) spanAt(p uintptr) *span {
	if ch.huge != nil {
		return ch.huge
	}
	return ch.pages[(p-ch.base)>>pageShift].Load()
}

func hdr(p uintptr) *header                { return (*header)(cmem.Ptr(p - hdrSize)) }
func tag(magic uint32, off uintptr) uint32 { return magic<<16 | uint32(off) }
func (hd *header) owner() uint32           { return hd.meta >> 16 }
func (hd *header) size() uintptr           { return uintptr(hd.meta & 0xffff) }
func (hd *header) setSize(n uintptr)       { hd.meta = hd.meta&^0xffff | uint32(n) }

// A freed slot links to the next through its second word (the first user
// word when the user pointer is 8 bytes in, padding otherwise), so the
// header's magic keeps saying "free".
func link(slot uintptr) uintptr        { return *(*uintptr)(cmem.Ptr(slot + 8)) }
func setLink(slot, next uintptr)       { *(*uintptr)(cmem.Ptr(slot + 8)) = next }
func roundUp(n, to uintptr) uintptr    { return (n + to - 1) &^ (to - 1) }
func pageMask(first, n uintptr) uint64 { return (^uint64(0) >> (64 - n)) << first }

// Span states.
const (
	spanDead uint32 = iota
	spanSmall
	spanLarge
	spanRetained // a huge region kept for reuse
	spanMixed    // small blocks of every class, first fit (mixed.go)
)

// span is a run of pages holding slots of one class, or one large block.
// Fields other than state are fixed while the span is alive; state and the
// free-slot bookkeeping change under Heap.mu.
type span struct {
	chunk  *chunk
	base   uintptr
	npages uintptr
	state  atomic.Uint32
	class  int
	size   uintptr // slot size (small) or footprint (large)

	// small spans
	divMul        uint64  // slot index of an offset o: o*divMul>>divShift (o/size without a divide)
	nslots, nfree uint32  // nfree: slots neither handed out nor cached
	cap           int32   // classCap of the class: FreeFast's spill threshold without a table lookup
	fresh         uintptr // next never-used slot when the free list is empty
	zeroed        bool    // cut from pages fresh from the source: never-used slots are zero
	free          uintptr // central free list
	next, prev    *span   // partial list of the class
	inPartial     bool

	// large blocks
	owner uint32
	req   uintptr

	mix *mixed // mixed spans
}

// chunk is a 4 MiB granule-aligned region: 64 pages of spans, or one huge
// region covering one or more granules.
type chunk struct {
	heap  *Heap
	base  uintptr
	size  uintptr
	pages [pagesPerChunk]atomic.Pointer[span]
	used  uint64 // pages in spans, and the reserved ones
	resv  uint64 // pages a PartialSource did not make usable (always in used)
	dirty uint64 // pages ever used (not known to be zero)
	huge  *span
}

type freeList struct {
	head uintptr
	n    int32
}

// pcache is one P's cache of free slots. Only the goroutine pinned to the P
// touches it, so the lists need no lock and no atomic instruction. Trim
// takes the caches away whole (see Trim).
type pcache struct {
	guard  pcpu.Guard
	lists  [numClasses]freeList
	spans  [4]*span // freed medium spans kept whole, reused without the heap lock
	nspans int
	// freed huge regions kept whole, oldest first, reused without the heap
	// lock (hugecache.go)
	regions  [hugePerP]*span
	nregions int
	credit   uintptr // KeepHuge budget the P holds beyond its regions (hugecache.go)
	took     uint8   // huge blocks the P served and kept no region for yet, at most hugePerP
	_        [64]byte
}

// cacheOf returns P pid's cache, guarded (release it with unpin), or nil
// while the P has no cache yet (GOMAXPROCS grew; the next refill grows the
// caches). Callers pin first, and unpin themselves when it is nil; pinning
// inside would put this over the inlining budget of the hot path.
func (h *Heap) cacheOf(pid int) *pcache {
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		return pc
	}
	return nil
}

// unpin releases a cache taken with cacheOf, and the P.
func (pc *pcache) unpin() {
	pc.guard.Unlock()
	pcpu.Unpin()
}

// Heap sub-allocates chunks from a Source: small blocks from per-P caches of
// size-class slots, medium blocks from page runs, huge blocks from regions of
// their own. Safe for concurrent use.
type Heap struct {
	src    Source
	cfg    Config
	caches atomic.Pointer[[]*pcache]

	countZeroed bool          // tests only: count what zeroBlock clears
	zeroedBytes atomic.Uint64 // bytes cleared for zero requests, when counted

	mu      sync.Mutex
	chunks  []*chunk
	empty   int // chunks with no pages in use
	partial [numClasses]*span
	spare   [maxMedium/pageSize + 1][]*span // freed medium spans by page count, kept for reuse
	spareN  int                             // bytes in spare
	huge    []*span                         // retained free huge regions of the central list, oldest first
	mixed   []*span                         // mixed spans (mixed.go)
	nhuge   int
	mapped  uintptr
	closed  atomic.Bool

	regions   map[*span]struct{} // every huge region held, for Stats (hugecache.go)
	kept      atomic.Uintptr     // KeepHuge's budget handed out: central list, P caches and credits
	keepHuge  atomic.Uintptr     // cfg.KeepHuge, read without h.mu (0 once closed)
	sizer     RegionSizer        // src's, when it sizes regions itself (nil: it does not)
	draining  atomic.Bool        // drainCaches owns every P's regions: Ps leave them alone
	drainMu   sync.Mutex         // one drainCaches or trim at a time
	lastDrain atomic.Int64       // when drainCaches last ran (nanotime), to space them out

	// Chunks and regions let go under mu, given back after it (giveback.go).
	doomed    []doomedRange
	relChunks int          // chunks on their way back to the source
	relHuge   int          // huge regions on their way back
	gate      sync.RWMutex // shared while ranges go back; Stats waits for them
}

// New returns a heap drawing on src.
func New(src Source, cfg Config) *Heap {
	h := &Heap{src: src, cfg: cfg, regions: map[*span]struct{}{}}
	h.keepHuge.Store(cfg.KeepHuge)
	if rs, ok := src.(RegionSizer); ok {
		h.sizer = rs
	}
	cs := make([]*pcache, runtime.GOMAXPROCS(0))
	for i := range cs {
		cs[i] = new(pcache)
	}
	h.caches.Store(&cs)
	return h
}

// Alloc returns size bytes aligned to align (a power of two; at least 16),
// with owner recorded for Free. zero asks for zeroed memory. footprint is
// what the block occupies, for quotas.
func (h *Heap) Alloc(size, align uintptr, owner uint32, zero bool) (p, footprint uintptr, err error) {
	return h.AllocCounted(size, align, owner, zero, nil)
}

// AllocCounted is Alloc that also counts the block in t (nil: nowhere);
// Free counts it out of the tally registered for owner (SetTally).
// It does not count down to heap-profile samples: its callers sample
// what they allocate themselves (memsample.Tick).
func (h *Heap) AllocCounted(size, align uintptr, owner uint32, zero bool, t *Tally) (p, footprint uintptr, err error) {
	if align < minAlign {
		align = minAlign
	}
	if size > maxAlloc || align > maxAlloc {
		return 0, 0, fmt.Errorf("%w: %d bytes aligned to %d", ErrTooLarge, size, align)
	}
	off := offFor(align)
	c := classFor(max(size, 1)+off, align)
	if c >= 0 && owner > maxOwner {
		return 0, 0, fmt.Errorf("%w: owner %d does not fit a small block's header", ErrTooLarge, owner)
	}
	if c < 0 {
		return h.allocLarge(size, align, owner, zero, t)
	}
	footprint = classSize[c]
	var slot uintptr
	counted, sample := false, false
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		l := &pc.lists[c]
		if slot = l.head; slot != 0 {
			l.head = link(slot)
			l.n--
			if t != nil {
				counted, sample = t.countPinned(pid, true, int64(size), int64(footprint))
			}
		}
		pc.guard.Unlock()
	}
	pcpu.Unpin()
	if slot == 0 {
		if slot, err = h.refill(c, align); err != nil {
			return 0, 0, err
		}
	}
	if t != nil && !counted {
		t.CountAlloc(int64(size), int64(footprint))
	} else if sample {
		t.SamplePeak()
	}
	if zero {
		return h.handOutZeroed(slot, off, size, owner), footprint, nil
	}
	return h.handOut(slot, off, size, owner), footprint, nil
}

// AllocSampled is AllocCounted that also counts the block down to the next
// heap-profile sample in t's shard, and hands what the profile samples to
// SampleHook (see Sample). The common case is one pinned section: pop a
// cached slot, count it, count it down.
func (h *Heap) AllocSampled(size, align uintptr, owner uint32, zero bool, t *Tally) (p, footprint uintptr, err error) {
	if align < minAlign {
		align = minAlign
	}
	if size > maxAlloc || align > maxAlloc {
		return 0, 0, fmt.Errorf("%w: %d bytes aligned to %d", ErrTooLarge, size, align)
	}
	off := offFor(align)
	c := classFor(max(size, 1)+off, align)
	if c >= 0 && owner > maxOwner {
		return 0, 0, fmt.Errorf("%w: owner %d does not fit a small block's header", ErrTooLarge, owner)
	}
	if c < 0 {
		if p, footprint, err = h.allocLarge(size, align, owner, zero, t); err == nil {
			sampleAsk(p, size, owner)
		}
		return p, footprint, err
	}
	footprint = classSize[c]
	var slot uintptr
	// rare: what allocRare has to do after the pinned section (the block
	// was not counted here, the peak is to be sampled, the profile takes
	// the block); 0 on the common path, one branch for all of them.
	rare := rareUncounted
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		l := &pc.lists[c]
		if slot = l.head; slot != 0 {
			l.head = link(slot)
			l.n--
			if t != nil {
				if sh, trip := t.countHot(pid, int64(size), int64(footprint)); sh != nil {
					rare = 0
					if trip { // the peak, or the heap profile is on (see SampleHook)
						// tripped, written out: taken at every allocation
						// while profiling, so kept out of a call.
						sh.guard.Lock()
						if sh.bytes > sh.next {
							sh.next = sh.bytes + PeakStep
							rare = rarePeak
						}
						if g := memsample.Gen(); g != 0 && sh.cd.Take(int64(size), g) {
							rare |= rareTake
						}
						sh.guard.Unlock()
					}
				}
			}
		}
		pc.guard.Unlock()
	}
	pcpu.Unpin()
	if slot == 0 {
		if slot, err = h.refill(c, align); err != nil {
			return 0, 0, err
		}
	}
	if zero {
		p = h.handOutZeroed(slot, off, size, owner)
	} else {
		p = h.handOut(slot, off, size, owner)
	}
	if rare != 0 {
		allocRare(p, size, footprint, owner, t, rare)
	}
	return p, footprint, nil
}

// allocRare is what follows a hot path's pinned section when it did not
// count the block (rare: it was not cached, or the P has no shard yet), or
// the peak is to be sampled, or the heap profile takes the block.
//
//go:noinline
func allocRare(p, size, foot uintptr, owner uint32, t *Tally, rare uint8) {
	if rare&rareUncounted != 0 {
		if t != nil {
			t.CountAlloc(int64(size), int64(foot))
		}
		sampleAsk(p, size, owner)
		return
	}
	if rare&rarePeak != 0 {
		t.SamplePeak()
	}
	if rare&rareTake != 0 {
		if f := SampleHook; f != nil {
			f(p, size, owner, true)
		}
	}
}

// sampleAsk hands a block the hot paths did not count down to SampleHook
// while the heap profile is on.
func sampleAsk(p, size uintptr, owner uint32) {
	if f := SampleHook; f != nil && memsample.On() {
		f(p, size, owner, false)
	}
}

// AllocGuarded serves an owner whose closing waits for its allocations in
// flight (closed is its flag; see Tally.Enter) from the P's cache alone, in
// one pinned section: Enter's mark, the check of closed, the pop of a
// cached slot (or, for a medium block, of a cached span), the count and
// Exit's unmark, where AllocCounted between Enter and Exit pins three
// times. Only with pcpu.HasBarrier, whose protocol it follows (atomic
// stores on the P's shard, see Enter; the closer's InFlight runs the
// barrier for the counts of frees). ok false (no
// barrier, a huge block, nothing cached for the size, a P without a cache
// or shard yet) means nothing was done: the caller takes the general path
// between Enter and Exit. refused: closed was set. A block the P's
// heap-profile countdown takes goes to SampleHook (see Sample).
func (h *Heap) AllocGuarded(size, align uintptr, owner uint32, zero bool, t *Tally, closed *atomic.Bool) (p, footprint uintptr, ok, refused bool) {
	if !pcpu.HasBarrier {
		return 0, 0, false, false
	}
	if align < minAlign {
		align = minAlign
	}
	if size > maxSmall {
		return h.allocSpanGuarded(size, align, owner, zero, t, closed)
	}
	if owner > maxOwner {
		return 0, 0, false, false
	}
	off := offFor(align)
	c := classFor(max(size, 1)+off, align)
	if c < 0 {
		return 0, 0, false, false
	}
	footprint = classSize[c]
	var slot uintptr
	rare := uint8(0) // as in AllocSampled
	pid := pcpu.Pin()
	if cs, ts := *h.caches.Load(), *t.shards.Load(); pid < len(cs) && pid < len(ts) {
		sh := ts[pid]
		addMark(&sh.inflight, 1) // Enter's mark: the load of closed below must not pass it (see Enter)
		if closed.Load() {
			refused = true
		} else {
			pc := cs[pid]
			pc.guard.Lock()
			l := &pc.lists[c]
			if slot = l.head; slot != 0 {
				l.head = link(slot)
				l.n--
				if _, trip := t.countHot(pid, int64(size), int64(footprint)); trip { // pid has a shard: sh
					rare = sh.tripped(int64(size)) // the peak, or the heap profile is on
				}
			}
			pc.guard.Unlock()
		}
		addMark(&sh.inflight, -1) // Exit's: after the count above
	}
	pcpu.Unpin()
	if slot == 0 {
		return 0, 0, false, refused
	}
	if zero {
		p = h.handOutZeroed(slot, off, size, owner)
	} else {
		p = h.handOut(slot, off, size, owner)
	}
	if rare != 0 {
		allocRare(p, size, footprint, owner, t, rare)
	}
	return p, footprint, true, false
}

// allocSpanGuarded is AllocGuarded for a medium block: a span of the P's
// cache (see cacheSpan), taken in the one pinned section.
func (h *Heap) allocSpanGuarded(size, align uintptr, owner uint32, zero bool, t *Tally, closed *atomic.Bool) (p, footprint uintptr, ok, refused bool) {
	if size > maxMedium || align > maxMedium {
		return h.allocRegionGuarded(size, align, owner, zero, t, closed)
	}
	foot := roundUp(size, pageSize)
	var s *span
	rare := uint8(0)
	pid := pcpu.Pin()
	if cs, ts := *h.caches.Load(), *t.shards.Load(); pid < len(cs) && pid < len(ts) {
		sh := ts[pid]
		addMark(&sh.inflight, 1) // as in AllocGuarded
		if closed.Load() {
			refused = true
		} else {
			pc := cs[pid]
			pc.guard.Lock()
			if s = pc.takeSpan(foot/pageSize, align); s != nil {
				if _, trip := t.countHot(pid, int64(size), int64(s.size+descSize)); trip {
					rare = sh.tripped(int64(size)) // the peak, or the heap profile is on
				}
			}
			pc.guard.Unlock()
		}
		addMark(&sh.inflight, -1)
	}
	pcpu.Unpin()
	if s == nil {
		return 0, 0, false, refused
	}
	s.owner, s.req = owner, size
	publish(&s.state, spanLarge)
	if zero {
		h.zeroBlock(s.base, size)
	}
	if rare != 0 {
		allocRare(s.base, size, s.size+descSize, owner, t, rare)
	}
	return s.base, s.size + descSize, true, false
}

// handOut writes the header of a slot taken for a block and returns the
// user pointer; zero requests take handOutZeroed. Small enough to inline
// into the allocation paths.
func (h *Heap) handOut(slot, off, size uintptr, owner uint32) uintptr {
	// Plain stores: the block is not yet shared, and whoever frees it later
	// learns of it through the program's own synchronisation.
	if off > hdrSize {
		*(*uint32)(cmem.Ptr(slot)) = usedMark
	}
	p := slot + off
	hd := hdr(p)
	hd.meta, hd.tag = owner<<16|uint32(size), tag(magicLive, off)
	return p
}

// handOutZeroed is handOut that also clears what a zero request needs
// cleared.
func (h *Heap) handOutZeroed(slot, off, size uintptr, owner uint32) uintptr {
	clear := !neverUsed(slot) // before the header and mark change it
	p := h.handOut(slot, off, size, owner)
	if clear {
		h.zeroBlock(p, size)
	} else if off == hdrSize {
		// Never used, but a free list ran through its first word.
		cmem.Zero(p, min(size, 8))
	}
	return p
}

// Free releases the block at p, whichever heap it came from. Foreign and
// interior pointers and double frees are reported and change nothing.
//
// A stale pointer may point into a chunk another goroutine is releasing
// (a double free racing Trim): the lookup, the header's check and its
// compare-and-swap run pinned, and a released chunk is unmapped only after
// a grace period in which every goroutine pinned at its release has
// unpinned (see giveback.go), so they never read unmapped memory.
func Free(p uintptr) (Block, error) {
	b, _, err := FreeCounted(p)
	return b, err
}

// FreeCounted is Free that also returns the tally the block was counted
// out of: the one registered for its owner when Free looked it up, before
// counting (nil: none). Once the block is counted out its owner may be
// gone and the id registered anew; the tally still names the block's
// owner.
func FreeCounted(p uintptr) (Block, *Tally, error) {
	pid := pcpu.Pin()
	ch := lookupLow(p) // inlined: lookup's common case
	if ch == nil {
		if ch = lookupHigh(p); ch == nil {
			pcpu.Unpin()
			return Block{}, nil, fmt.Errorf("%w: %#x", ErrForeign, p)
		}
	}
	h := ch.heap
	if ch.huge != nil {
		return h.freeLarge(pid, ch, ch.huge, p) // unpins
	}
	s := ch.pages[(p-ch.base)>>pageShift].Load()
	if s == nil {
		pcpu.Unpin()
		return Block{}, nil, h.notAtBlock(ch, p)
	}
	if s.state.Load() != spanSmall {
		return h.freeLarge(pid, ch, s, p) // unpins
	}
	// The common case inline: p is 16-aligned at its slot's recorded offset
	// and wins the CAS live → free. Anything else, checkSmall explains.
	first := s.base + hdrSize
	slot := first + uintptr(uint64(p-first)*s.divMul>>divShift)*s.size
	hd := hdr(p)
	if p%minAlign != 0 || p < first || p-slot < hdrSize ||
		!atomic.CompareAndSwapUint32(&hd.tag, tag(magicLive, p-slot), tag(magicFree, p-slot)) {
		if staleFreeHook != nil {
			staleFreeHook()
		}
		_, bad := smallState(s, p)
		pcpu.Unpin()
		if bad != smallLive {
			return Block{}, nil, smallErr(bad, p)
		}
		return Block{}, nil, fmt.Errorf("%w: %#x", ErrDoubleFree, p) // a racing free won the CAS
	}
	owner, size := hd.owner(), hd.size()
	t := tallyOf(owner)                             // before the block is counted out (see FreeCounted)
	h.freeSlot(pid, s.class, slot, t, size, s.size) // unpins
	return Block{Heap: h, Owner: owner, Size: size, Footprint: s.size}, t, nil
}

// staleFreeHook, set by tests only, runs in Free between a failed
// compare-and-swap of a small block's header and the checks that explain
// it: the window in which a stale pointer's chunk can be released.
var staleFreeHook func()

// Inspect validates p like Free and describes its block without freeing it.
func Inspect(p uintptr) (Block, error) {
	pcpu.Pin() // the chunk stays mapped while the header is read (see Free)
	ch := lookup(p)
	if ch == nil {
		pcpu.Unpin()
		return Block{}, fmt.Errorf("%w: %#x", ErrForeign, p)
	}
	h := ch.heap
	s := ch.spanAt(p)
	if s == nil {
		pcpu.Unpin()
		return Block{}, h.notAtBlock(ch, p)
	}
	st := s.state.Load()
	if st == spanSmall {
		_, bad := smallState(s, p)
		var b Block
		if bad == smallLive {
			hd := hdr(p)
			b = Block{Heap: h, Owner: hd.owner(), Size: hd.size(), Footprint: s.size}
		}
		pcpu.Unpin()
		if bad != smallLive {
			return Block{}, smallErr(bad, p)
		}
		return b, nil
	}
	pcpu.Unpin()
	switch st {
	case spanLarge:
		h.mu.Lock()
		defer h.mu.Unlock()
		if p != s.base {
			return Block{}, fmt.Errorf("%w: %#x", ErrInvalid, p)
		}
		return Block{Heap: h, Owner: s.owner, Size: s.req, Footprint: s.size + descSize}, nil
	case spanMixed:
		b, _, err := h.inspectMixed(s, p)
		return b, err
	}
	return Block{}, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
}

// Name returns the heap's configured name.
func (h *Heap) Name() string { return h.cfg.Name }

// Footprint returns the bytes Alloc(size, align) would occupy, so quotas
// can be charged before allocating: the slot of a small block (header
// included), or the pages of a large one plus its 16-byte descriptor, which
// lives in its span rather than before the block. As in libomp, a block's
// footprint is always more than its size: two 1 MiB blocks do not fit a
// 2 MiB quota.
func Footprint(size, align uintptr) uintptr {
	if align < minAlign {
		align = minAlign
	}
	if c := classFor(max(size, 1)+offFor(align), align); c >= 0 {
		return classSize[c]
	}
	return roundUp(max(size, 1), pageSize) + descSize
}
