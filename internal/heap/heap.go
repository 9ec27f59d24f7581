package heap

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/cmem"
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
}

// header sits just before every small block's user pointer. Large blocks
// keep the same facts in their span instead, so they have no header.
type header struct {
	magic uint32 // written plainly when the block is handed out, swapped atomically by Free
	owner uint32
	size  uint32 // requested size (small blocks are < 4 GiB)
	off   uint32 // user pointer - slot start
}

const (
	magicLive = 0x4f4d5041 // "APMO"
	magicFree = 0x4f4d5046 // "FPMO"
)

func hdr(p uintptr) *header { return (*header)(cmem.Ptr(p - hdrSize)) }

// A freed slot links to the next through its second word (the header's
// size/off fields when the user pointer is 16 bytes in, padding otherwise),
// so the header's magic keeps saying "free".
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
	nslots, nfree uint32  // nfree: slots neither handed out nor cached
	fresh         uintptr // next never-used slot when the free list is empty
	free          uintptr // central free list
	next, prev    *span   // partial list of the class
	inPartial     bool

	// large blocks
	owner uint32
	req   uintptr
	off   uintptr
}

// chunk is a 4 MiB granule-aligned region: 64 pages of spans, or one huge
// region covering one or more granules.
type chunk struct {
	heap  *Heap
	base  uintptr
	size  uintptr
	pages [pagesPerChunk]atomic.Pointer[span]
	used  uint64 // pages in spans
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
	_      [64]byte
}

// Heap sub-allocates chunks from a Source: small blocks from per-P caches of
// size-class slots, medium blocks from page runs, huge blocks from regions of
// their own. Safe for concurrent use.
type Heap struct {
	src    Source
	cfg    Config
	caches atomic.Pointer[[]*pcache]

	mu       sync.Mutex
	chunks   []*chunk
	empty    int // chunks with no pages in use
	partial  [numClasses]*span
	spare    [maxMedium/pageSize + 1][]*span // freed medium spans by page count, kept for reuse
	spareN   int                             // bytes in spare
	huge     []*span                         // retained free huge regions
	retained uintptr
	nhuge    int
	mapped   uintptr
	closed   atomic.Bool
}

// New returns a heap drawing on src.
func New(src Source, cfg Config) *Heap {
	h := &Heap{src: src, cfg: cfg}
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
	if align < minAlign {
		align = minAlign
	}
	if size > maxAlloc || align > maxAlloc {
		return 0, 0, fmt.Errorf("%w: %d bytes aligned to %d", ErrTooLarge, size, align)
	}
	off := max(hdrSize, align)
	if c := classFor(max(size, 1)+off, align); c >= 0 {
		slot, err := h.allocSlot(c)
		if err != nil {
			return 0, 0, err
		}
		p = slot + off
		hd := hdr(p)
		// A plain store: the block is not yet shared, and whoever frees it
		// later learns of it through the program's own synchronisation.
		hd.owner, hd.size, hd.off, hd.magic = owner, uint32(size), uint32(off), magicLive
		if zero {
			cmem.Zero(p, size)
		}
		return p, classSize[c], nil
	}
	return h.allocLarge(size, align, owner, zero)
}

func (h *Heap) allocSlot(c int) (uintptr, error) {
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		l := &pc.lists[c]
		if s := l.head; s != 0 {
			l.head = link(s)
			l.n--
			pc.guard.Unlock()
			pcpu.Unpin()
			return s, nil
		}
		pc.guard.Unlock()
	}
	pcpu.Unpin()
	return h.refill(c)
}

// refill takes a batch of slots from the central lists, returns one and
// caches the rest on the current P.
func (h *Heap) refill(c int) (uintptr, error) {
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		return 0, ErrClosed
	}
	if n := runtime.GOMAXPROCS(0); n > len(*h.caches.Load()) {
		h.growCaches(n)
	}
	head, tail, n, err := h.takeSlots(c, int(classCap[c]/2))
	h.mu.Unlock()
	if err != nil {
		return 0, err
	}
	first, rest := head, link(head)
	if n--; n == 0 {
		return first, nil
	}
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		l := &pc.lists[c]
		setLink(tail, l.head)
		l.head = rest
		l.n += int32(n)
		pc.guard.Unlock()
		pcpu.Unpin()
		return first, nil
	}
	pcpu.Unpin()
	h.mu.Lock()
	h.returnList(rest)
	h.mu.Unlock()
	return first, nil
}

func (h *Heap) growCaches(n int) {
	old := *h.caches.Load()
	cs := make([]*pcache, n)
	copy(cs, old)
	for i := len(old); i < n; i++ {
		cs[i] = new(pcache)
	}
	h.caches.Store(&cs)
}

// takeSlots unlinks up to want slots of class c from partial spans, making
// a new span if none has any. Called with h.mu held.
func (h *Heap) takeSlots(c, want int) (head, tail uintptr, n int, err error) {
	for n < want {
		s := h.partial[c]
		if s == nil {
			if n > 0 {
				break
			}
			if s, err = h.newSmallSpan(c); err != nil {
				return 0, 0, 0, err
			}
		}
		for n < want && s.nfree > 0 {
			var slot uintptr
			if s.free != 0 {
				slot, s.free = s.free, link(s.free)
			} else {
				slot = s.fresh
				s.fresh += s.size
			}
			s.nfree--
			if n == 0 {
				head = slot
			} else {
				setLink(tail, slot)
			}
			tail = slot
			n++
		}
		if s.nfree == 0 {
			h.unlinkPartial(s)
		}
	}
	setLink(tail, 0)
	return head, tail, n, nil
}

func (h *Heap) newSmallSpan(c int) (*span, error) {
	np := classPages[c]
	ch, first, _, err := h.allocPages(np, 1)
	if err != nil {
		return nil, err
	}
	s := &span{chunk: ch, base: ch.base + first*pageSize, npages: np, class: c, size: classSize[c]}
	s.nslots = uint32(np * pageSize / s.size)
	s.nfree = s.nslots
	s.fresh = s.base
	s.state.Store(spanSmall)
	for i := first; i < first+np; i++ {
		ch.pages[i].Store(s)
	}
	h.linkPartial(s)
	return s, nil
}

func (h *Heap) linkPartial(s *span) {
	s.prev, s.next = nil, h.partial[s.class]
	if s.next != nil {
		s.next.prev = s
	}
	h.partial[s.class] = s
	s.inPartial = true
}

func (h *Heap) unlinkPartial(s *span) {
	if !s.inPartial {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		h.partial[s.class] = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.next, s.prev, s.inPartial = nil, nil, false
}

// returnList gives a linked list of slots back to their spans. h.mu held.
func (h *Heap) returnList(slot uintptr) {
	for slot != 0 {
		next := link(slot)
		h.returnSlot(slot)
		slot = next
	}
}

func (h *Heap) returnSlot(slot uintptr) {
	ch := lookup(slot)
	s := ch.pages[(slot-ch.base)>>pageShift].Load()
	setLink(slot, s.free)
	s.free = slot
	s.nfree++
	if s.nfree == s.nslots {
		h.unlinkPartial(s)
		h.freeSpan(s)
	} else if !s.inPartial {
		h.linkPartial(s)
	}
}

// allocPages finds n free pages, the first a multiple of alignPages, in a
// chunk (first fit), taking a new chunk when none has room. h.mu held.
func (h *Heap) allocPages(n, alignPages uintptr) (ch *chunk, first uintptr, fresh bool, err error) {
	for _, c := range h.chunks {
		if c.used == ^uint64(0) {
			continue
		}
		for i := uintptr(0); i+n <= pagesPerChunk; i += alignPages {
			if m := pageMask(i, n); c.used&m == 0 {
				return c, i, h.takePages(c, m), nil
			}
		}
	}
	p, err := h.src.Acquire(chunkSize, chunkSize)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%w: %s: a %d-byte chunk: %w", ErrNoMemory, h.cfg.Name, chunkSize, err)
	}
	c := &chunk{heap: h, base: p, size: chunkSize}
	h.chunks = append(h.chunks, c)
	h.mapped += chunkSize
	h.empty++
	setGranules(p, chunkSize, c)
	return c, 0, h.takePages(c, pageMask(0, n)), nil
}

func (h *Heap) takePages(c *chunk, m uint64) (fresh bool) {
	if c.used == 0 {
		h.empty--
	}
	fresh = c.dirty&m == 0
	c.used |= m
	c.dirty |= m
	return fresh
}

// freeSpan returns a span's pages to its chunk, and the chunk to the source
// when more chunks are empty than the heap keeps. h.mu held.
func (h *Heap) freeSpan(s *span) {
	ch := s.chunk
	first := (s.base - ch.base) >> pageShift
	ch.pages[first].Store(nil)
	if s.state.Load() == spanSmall {
		for i := first + 1; i < first+s.npages; i++ {
			ch.pages[i].Store(nil)
		}
	}
	s.state.Store(spanDead)
	ch.used &^= pageMask(first, s.npages)
	if ch.used == 0 {
		h.empty++
		if h.empty > h.cfg.KeepChunks {
			h.releaseChunk(ch)
		}
	}
}

func (h *Heap) releaseChunk(ch *chunk) {
	for i, c := range h.chunks {
		if c == ch {
			h.chunks = append(h.chunks[:i], h.chunks[i+1:]...)
			break
		}
	}
	h.empty--
	h.mapped -= ch.size
	setGranules(ch.base, ch.size, nil)
	_ = h.src.Release(ch.base, ch.size) // the table no longer points here: nothing can reach it
}

// allocLarge serves blocks too big for size classes: page runs inside a
// chunk up to 2 MiB, regions of their own beyond. Large blocks carry no
// header: the user pointer is the span's start, aligned to 64 KiB or more.
func (h *Heap) allocLarge(size, align uintptr, owner uint32, zero bool) (uintptr, uintptr, error) {
	foot := roundUp(max(size, 1), pageSize)
	if foot <= maxMedium && align <= maxMedium {
		if s := h.takeCachedSpan(foot/pageSize, align); s != nil {
			s.owner, s.req = owner, size
			s.state.Store(spanLarge)
			if zero {
				cmem.Zero(s.base, size)
			}
			return s.base, foot + hdrSize, nil
		}
	}
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		return 0, 0, ErrClosed
	}
	if foot <= maxMedium && align <= maxMedium {
		if s := h.reuseSpare(foot/pageSize, align); s != nil {
			s.owner, s.req = owner, size
			s.state.Store(spanLarge)
			h.mu.Unlock()
			if zero {
				cmem.Zero(s.base, size)
			}
			return s.base, foot + hdrSize, nil
		}
		ch, first, fresh, err := h.allocPages(foot/pageSize, max(1, align/pageSize))
		if err != nil {
			h.mu.Unlock()
			return 0, 0, err
		}
		s := &span{chunk: ch, base: ch.base + first*pageSize, npages: foot / pageSize, size: foot, owner: owner, req: size}
		s.state.Store(spanLarge)
		// Only the first page points at a large span: a valid Free names it,
		// and the page bitmap tells interior pointers from free pages.
		ch.pages[first].Store(s)
		h.mu.Unlock()
		if zero && !fresh {
			cmem.Zero(s.base, size)
		}
		return s.base, foot + hdrSize, nil
	}
	s, fresh := h.reuseHuge(foot, align)
	h.mu.Unlock()
	if s == nil {
		p, err := h.src.Acquire(foot, max(align, chunkSize))
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %s: a %d-byte region: %w", ErrNoMemory, h.cfg.Name, foot, err)
		}
		ch := &chunk{heap: h, base: p, size: foot}
		s = &span{chunk: ch, base: p, npages: foot / pageSize, size: foot}
		ch.huge = s
		h.mu.Lock()
		h.mapped += foot
		h.nhuge++
		h.mu.Unlock()
		setGranules(p, foot, ch)
		fresh = true
	}
	s.owner, s.req = owner, size
	s.state.Store(spanLarge)
	if zero && !fresh {
		cmem.Zero(s.base, size)
	}
	return s.base, s.size + hdrSize, nil
}

// maxSpare bounds the bytes of freed medium spans a heap keeps whole.
const maxSpare = 16 << 20

// reuseSpare pops a kept medium span of exactly n pages aligned to align.
// h.mu held.
func (h *Heap) reuseSpare(n, align uintptr) *span {
	l := h.spare[n]
	for i := len(l) - 1; i >= 0; i-- {
		if s := l[i]; s.base%align == 0 {
			h.spare[n] = append(l[:i], l[i+1:]...)
			h.spareN -= int(s.size)
			return s
		}
	}
	return nil
}

// dropSpare returns every kept medium span's pages to its chunk. h.mu held.
func (h *Heap) dropSpare() {
	for n, l := range h.spare {
		for _, s := range l {
			h.freeSpan(s)
		}
		h.spare[n] = nil
	}
	h.spareN = 0
}

// reuseHuge takes a retained region that fits foot bytes without wasting
// more than a quarter: large blocks are never rounded to powers of two.
func (h *Heap) reuseHuge(foot, align uintptr) (*span, bool) {
	best := -1
	for i, s := range h.huge {
		if s.size >= foot && s.size-foot <= foot/4 && s.base%align == 0 &&
			(best < 0 || s.size < h.huge[best].size) {
			best = i
		}
	}
	if best < 0 {
		return nil, false
	}
	s := h.huge[best]
	h.huge = append(h.huge[:best], h.huge[best+1:]...)
	h.retained -= s.size
	return s, false
}

// Free releases the block at p, whichever heap it came from. Foreign and
// interior pointers and double frees are reported and change nothing.
func Free(p uintptr) (Block, error) {
	ch := lookup(p)
	if ch == nil {
		return Block{}, fmt.Errorf("%w: %#x", ErrForeign, p)
	}
	h := ch.heap
	if ch.huge != nil {
		return h.freeLarge(ch, ch.huge, p)
	}
	s := ch.pages[(p-ch.base)>>pageShift].Load()
	if s == nil {
		return Block{}, h.notAtBlock(ch, p)
	}
	if s.state.Load() != spanSmall {
		return h.freeLarge(ch, s, p)
	}
	slot, err := checkSmall(s, p)
	if err != nil {
		return Block{}, err
	}
	hd := hdr(p)
	b := Block{Heap: h, Owner: hd.owner, Size: uintptr(hd.size), Footprint: s.size}
	if !atomic.CompareAndSwapUint32(&hd.magic, magicLive, magicFree) {
		return Block{}, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	h.freeSlot(s.class, slot)
	return b, nil
}

// notAtBlock explains a pointer whose page starts no span: inside a large
// block, or in free pages.
func (h *Heap) notAtBlock(ch *chunk, p uintptr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch.used&(1<<((p-ch.base)>>pageShift)) != 0 {
		return fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	return fmt.Errorf("%w: %#x is in free pages of heap %s", ErrForeign, p, h.cfg.Name)
}

// checkSmall validates that p is the user pointer of a live slot of s.
func checkSmall(s *span, p uintptr) (slot uintptr, err error) {
	if p%minAlign != 0 { // every block is 16-aligned; and the header read below must be aligned
		return 0, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	rel := uint32(p - s.base)
	slot = s.base + uintptr(rel/uint32(s.size))*s.size
	off := p - slot
	if off < hdrSize {
		return 0, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	hd := hdr(p)
	switch m := atomic.LoadUint32(&hd.magic); {
	case m == magicFree:
		return 0, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	case m != magicLive || uintptr(hd.off) != off:
		return 0, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	return slot, nil
}

func (h *Heap) freeSlot(c int, slot uintptr) {
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		l := &pc.lists[c]
		setLink(slot, l.head)
		l.head = slot
		l.n++
		if l.n <= classCap[c] {
			pc.guard.Unlock()
			pcpu.Unpin()
			return
		}
		// Over capacity: hand half back to the central lists.
		k := l.n / 2
		head, tail := l.head, l.head
		for i := int32(1); i < k; i++ {
			tail = link(tail)
		}
		l.head = link(tail)
		l.n -= k
		setLink(tail, 0)
		pc.guard.Unlock()
		pcpu.Unpin()
		h.mu.Lock()
		h.returnList(head)
		h.mu.Unlock()
		return
	}
	pcpu.Unpin()
	h.mu.Lock()
	setLink(slot, 0)
	h.returnList(slot)
	h.mu.Unlock()
}

func (h *Heap) freeLarge(ch *chunk, s *span, p uintptr) (Block, error) {
	if p != s.base {
		return Block{}, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	// The state change decides which of two racing frees wins.
	if !s.state.CompareAndSwap(spanLarge, spanRetained) {
		if st := s.state.Load(); st == spanRetained || st == spanDead {
			return Block{}, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
		}
		return Block{}, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	b := Block{Heap: h, Owner: s.owner, Size: s.req, Footprint: s.size + hdrSize}
	if ch.huge == nil && h.cacheSpan(s) {
		return b, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keepOrFree(s)
	return b, nil
}

// keepOrFree parks a freed large span (state retained) in the central
// spares, or gives its memory back. h.mu held.
func (h *Heap) keepOrFree(s *span) {
	closed := h.closed.Load()
	if s.chunk.huge == nil {
		if h.spareN+int(s.size) <= maxSpare && !closed {
			// Keep the span whole for the next block of its size: no page
			// search, no new span, and for pinned heaps no relocking.
			h.spare[s.npages] = append(h.spare[s.npages], s)
			h.spareN += int(s.size)
			return
		}
		h.freeSpan(s)
		return
	}
	if h.retained+s.size <= h.cfg.KeepHuge && !closed {
		h.huge = append(h.huge, s)
		h.retained += s.size
		return
	}
	h.releaseHuge(s)
}

// cacheSpan keeps a freed medium span in the current P's cache.
func (h *Heap) cacheSpan(s *span) bool {
	if h.closed.Load() {
		return false
	}
	ok := false
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		if pc.nspans < len(pc.spans) {
			pc.spans[pc.nspans] = s
			pc.nspans++
			ok = true
		}
		pc.guard.Unlock()
	}
	pcpu.Unpin()
	return ok
}

// takeCachedSpan takes a cached medium span of n pages aligned to align
// from the current P's cache.
func (h *Heap) takeCachedSpan(n, align uintptr) *span {
	var s *span
	pid := pcpu.Pin()
	if cs := *h.caches.Load(); pid < len(cs) {
		pc := cs[pid]
		pc.guard.Lock()
		for i := pc.nspans - 1; i >= 0; i-- {
			if c := pc.spans[i]; c.npages == n && c.base%align == 0 {
				s = c
				pc.nspans--
				pc.spans[i] = pc.spans[pc.nspans]
				pc.spans[pc.nspans] = nil
				break
			}
		}
		pc.guard.Unlock()
	}
	pcpu.Unpin()
	return s
}

func (h *Heap) releaseHuge(s *span) {
	s.state.Store(spanDead)
	h.mapped -= s.size
	h.nhuge--
	setGranules(s.base, s.size, nil)
	_ = h.src.Release(s.base, s.size)
}

// Inspect validates p like Free and describes its block without freeing it.
func Inspect(p uintptr) (Block, error) {
	ch := lookup(p)
	if ch == nil {
		return Block{}, fmt.Errorf("%w: %#x", ErrForeign, p)
	}
	h := ch.heap
	s := ch.huge
	if s == nil {
		if s = ch.pages[(p-ch.base)>>pageShift].Load(); s == nil {
			return Block{}, h.notAtBlock(ch, p)
		}
	}
	switch s.state.Load() {
	case spanSmall:
		if _, err := checkSmall(s, p); err != nil {
			return Block{}, err
		}
		hd := hdr(p)
		return Block{Heap: h, Owner: hd.owner, Size: uintptr(hd.size), Footprint: s.size}, nil
	case spanLarge:
		h.mu.Lock()
		defer h.mu.Unlock()
		if p != s.base {
			return Block{}, fmt.Errorf("%w: %#x", ErrInvalid, p)
		}
		return Block{Heap: h, Owner: s.owner, Size: s.req, Footprint: s.size + hdrSize}, nil
	}
	return Block{}, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
}

// Trim drains every P's cache into the central lists and returns empty
// chunks and retained regions to the source. It returns the bytes released.
//
// Draining uses a grace period, as RCU does: Trim installs fresh caches,
// then waits for a stop-the-world (runtime.GC has one), which cannot happen
// while any goroutine is pinned. After it, no goroutine can still be inside
// an old cache, and Trim owns them. Trim therefore costs a GC cycle; it is
// meant for rare calls (DestroyAllocator, idle periods, tests).
func (h *Heap) Trim() uintptr {
	h.mu.Lock()
	old := *h.caches.Load()
	fresh := make([]*pcache, len(old))
	for i := range fresh {
		fresh[i] = new(pcache)
	}
	h.caches.Store(&fresh)
	h.mu.Unlock()
	runtime.GC()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pc := range old {
		pc.guard.Lock() // uncontended: the grace period made the old caches ours
		for _, l := range pc.lists {
			h.returnList(l.head)
		}
		for _, s := range pc.spans[:pc.nspans] {
			h.keepOrFree(s)
		}
		pc.guard.Unlock()
	}
	before := h.mapped
	h.dropSpare()
	for _, s := range h.huge {
		h.releaseHuge(s)
	}
	h.huge, h.retained = nil, 0
	for i := len(h.chunks) - 1; i >= 0; i-- {
		if ch := h.chunks[i]; ch.used == 0 {
			h.releaseChunk(ch)
		}
	}
	return before - h.mapped
}

// Close trims the heap and refuses further allocation. Blocks still live
// stay valid until freed; their memory returns to the source as it empties.
func (h *Heap) Close() {
	h.Trim()
	h.mu.Lock()
	h.closed.Store(true)
	h.cfg.KeepChunks, h.cfg.KeepHuge = 0, 0
	h.mu.Unlock()
}

// Stats describes what a heap holds.
type Stats struct {
	Mapped      uintptr // bytes held from the source
	Chunks      int     // 4 MiB chunks
	EmptyChunks int     // of which hold no block
	Huge        int     // huge regions, retained ones included
	Retained    uintptr // bytes of retained free huge regions
}

// Stats returns a snapshot of the heap's holdings.
func (h *Heap) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Mapped: h.mapped, Chunks: len(h.chunks), EmptyChunks: h.empty, Huge: h.nhuge, Retained: h.retained}
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
	if c := classFor(max(size, 1)+max(hdrSize, align), align); c >= 0 {
		return classSize[c]
	}
	return roundUp(max(size, 1), pageSize) + hdrSize
}
