package heap

// Large blocks: page runs inside a chunk (medium, up to 2 MiB) and regions
// of their own (huge); freed ones are kept whole for reuse.

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// allocPages finds n free pages, the first a multiple of alignPages, in a
// chunk (first fit), taking a new chunk when none has room. h.mu held.
func (h *Heap) allocPages(n, alignPages uintptr) (ch *chunk, first uintptr, fresh bool, err error) {
	ch, first, fresh, _, err = h.allocPagesOr(n, n, alignPages, false)
	return ch, first, fresh, err
}

// errUseMixed says a small block goes to a mixed span (mixed.go).
var errUseMixed = errors.New("heap: a mixed span serves this block")

// allocPagesOr is allocPages that settles for least pages (≤ n) when a new
// chunk is needed and the source makes fewer than n usable; got says how
// many it took. For a small span (small), chunks the source made usable
// only in part are left to mixed spans: errUseMixed when only such a chunk
// has room, or a new chunk is one. h.mu held.
func (h *Heap) allocPagesOr(n, least, alignPages uintptr, small bool) (ch *chunk, first uintptr, fresh bool, got uintptr, err error) {
	partial := false
	for _, c := range h.chunks {
		if small && c.resv != 0 {
			partial = true // its mixed spans may have room too
			continue
		}
		if c.used == ^uint64(0) {
			continue
		}
		for i := uintptr(0); i+n <= pagesPerChunk; i += alignPages {
			if m := pageMask(i, n); c.used&m == 0 {
				return c, i, h.takePages(c, m), n, nil
			}
		}
	}
	if partial {
		return nil, 0, false, 0, errUseMixed // the source gives chunks in part: no new one
	}
	p, usable, err := h.acquireChunk(least * pageSize)
	if err != nil {
		// A source that cannot give a chunk (a pinned-bytes limit below
		// one) may have left room for least pages in one it gave before:
		// a small limit serves what fits in it.
		if least < n {
			for _, c := range h.chunks {
				if small && c.resv != 0 {
					continue
				}
				for i := uintptr(0); i+least <= pagesPerChunk; i += alignPages {
					if m := pageMask(i, least); c.used&m == 0 {
						return c, i, h.takePages(c, m), least, nil
					}
				}
			}
		}
		return nil, 0, false, 0, fmt.Errorf("%w: %s: a %d-byte chunk: %w", ErrNoMemory, h.cfg.Name, chunkSize, err)
	}
	c := h.addChunk(p, usable)
	if small && usable < chunkSize {
		return nil, 0, false, 0, errUseMixed
	}
	if usable < n*pageSize {
		n = least
	}
	return c, 0, h.takePages(c, pageMask(0, n)), n, nil
}

// addChunk records a chunk from the source, usable bytes of it. h.mu held.
func (h *Heap) addChunk(p, usable uintptr) *chunk {
	c := &chunk{heap: h, base: p, size: chunkSize}
	if usable < chunkSize {
		c.resv = ^pageMask(0, usable>>pageShift)
		c.used = c.resv
	}
	h.chunks = append(h.chunks, c)
	h.mapped += usable
	h.empty++
	setGranules(p, chunkSize, c)
	return c
}

// acquireChunk gets a chunk from the source, and how much of it is usable.
// A source that refuses while chunks are on their way back to it (their
// release waits for a grace period on a goroutine of its own: giveback.go)
// or while free huge regions are kept (centrally or in P caches:
// hugecache.go) is asked again once they are back (giveIdle): under a
// pinned-bytes limit they hold the room a new chunk needs. h.mu held;
// dropped meanwhile.
func (h *Heap) acquireChunk(need uintptr) (p, usable uintptr, err error) {
	p, usable, err = h.acquireChunkOnce(need)
	if err != nil && (h.relChunks+h.relHuge > 0 || h.kept.Load() > 0) {
		h.mu.Unlock()
		again := h.giveIdle()
		h.mu.Lock()
		if again {
			p, usable, err = h.acquireChunkOnce(need)
		}
	}
	return p, usable, err
}

func (h *Heap) acquireChunkOnce(need uintptr) (p, usable uintptr, err error) {
	if ps, ok := h.src.(PartialSource); ok {
		p, usable, err = ps.AcquireChunk(chunkSize, chunkSize, need)
		if err == nil && (usable < need || usable > chunkSize || usable%pageSize != 0) {
			_ = h.src.Release(p, chunkSize)
			return 0, 0, fmt.Errorf("the source made %d bytes of a chunk usable", usable)
		}
		return p, usable, err
	}
	p, err = h.src.Acquire(chunkSize, chunkSize)
	return p, chunkSize, err
}

func (h *Heap) takePages(c *chunk, m uint64) (fresh bool) {
	if c.used == c.resv {
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
	if st := s.state.Load(); st == spanSmall || st == spanMixed {
		for i := first + 1; i < first+s.npages; i++ {
			ch.pages[i].Store(nil)
		}
	}
	s.state.Store(spanDead)
	ch.used &^= pageMask(first, s.npages)
	if ch.used == ch.resv {
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
	setGranules(ch.base, ch.size, nil)
	h.doom(doomedRange{base: ch.base, size: ch.size, mapped: ch.size - uintptr(bits.OnesCount64(ch.resv))*pageSize})
}

// allocLarge serves blocks too big for size classes: page runs inside a
// chunk up to 2 MiB, regions of their own beyond. Large blocks carry no
// header: the user pointer is the span's start, aligned to 64 KiB or more.
//
// A huge block (size or alignment over maxMedium) for which the P's cache
// keeps a region is served here, in one pinned section that also counts it
// in t (hugecache.go), with no further frame; everything else goes to
// allocLargeCounted.
func (h *Heap) allocLarge(size, align uintptr, owner uint32, zero bool, t *Tally) (uintptr, uintptr, error) {
	if size <= maxMedium && align <= maxMedium {
		return h.allocLargeCounted(size, align, owner, zero, t)
	}
	foot := roundUp(max(size, 1), pageSize)
	if h.sizer != nil {
		foot = max(foot, h.sizer.RegionSize(foot))
	}
	pid := pcpu.Pin()
	cs := *h.caches.Load()
	if pid >= len(cs) || h.draining.Load() {
		pcpu.Unpin()
		return h.allocLargeCounted(size, align, owner, zero, t)
	}
	pc := cs[pid]
	pc.guard.Lock()
	s := pc.takeFit(foot, align)
	if s == nil {
		pc.guard.Unlock()
		pcpu.Unpin()
		return h.allocLargeCounted(size, align, owner, zero, t)
	}
	foot = s.size + descSize
	counted, sample := t == nil, false
	if !counted {
		counted, sample = t.countPinned(pid, true, int64(size), int64(foot))
	}
	pc.guard.Unlock()
	pcpu.Unpin()
	if !counted || sample {
		countRare(t, true, counted, int64(size), int64(foot))
	}
	s.owner, s.req = owner, size
	publish(&s.state, spanLarge)
	if zero {
		h.zeroBlock(s.base, size)
	}
	return s.base, foot, nil
}

// allocLargeCounted is allocLarge for every block the P's cache does not
// serve, counted in t.
func (h *Heap) allocLargeCounted(size, align uintptr, owner uint32, zero bool, t *Tally) (uintptr, uintptr, error) {
	p, foot, done, err := h.allocLargeUncounted(size, align, owner, zero, t)
	if err == nil && !done && t != nil {
		t.CountAlloc(int64(size), int64(foot))
	}
	return p, foot, err
}

// allocLargeUncounted is allocLarge; counted says it counted the block in t
// already (a cached span or region: in the pinned section that took it).
func (h *Heap) allocLargeUncounted(size, align uintptr, owner uint32, zero bool, t *Tally) (p, foot uintptr, counted bool, err error) {
	foot = roundUp(max(size, 1), pageSize)
	if foot <= maxMedium && align <= maxMedium {
		return h.allocMedium(foot, size, align, owner, zero, t)
	}
	if h.sizer != nil {
		foot = max(foot, h.sizer.RegionSize(foot))
	}
	h.mu.Lock()
	if h.closed.Load() {
		h.unlock()
		return 0, 0, false, ErrClosed
	}
	s := h.reuseHuge(foot, align)
	h.unlock()
	fresh := false
	if s == nil {
		if s, err = h.newRegion(foot, align); err != nil {
			return 0, 0, false, err
		}
		fresh = true
	}
	h.noteTook()
	s.owner, s.req = owner, size
	publish(&s.state, spanLarge)
	if zero && !fresh {
		h.zeroBlock(s.base, size)
	}
	return s.base, s.size + descSize, counted, nil
}

// allocMedium is allocLargeUncounted for a block of foot ≤ maxMedium bytes
// (a page run in a chunk), aligned to align ≤ maxMedium.
func (h *Heap) allocMedium(foot, size, align uintptr, owner uint32, zero bool, t *Tally) (p, _ uintptr, counted bool, err error) {
	if s := h.takeCachedSpan(foot/pageSize, align, size, t); s != nil {
		s.owner, s.req = owner, size
		publish(&s.state, spanLarge)
		if zero {
			h.zeroBlock(s.base, size)
		}
		return s.base, foot + descSize, true, nil
	}
	h.mu.Lock()
	if h.closed.Load() {
		h.unlock()
		return 0, 0, false, ErrClosed
	}
	if s := h.reuseSpare(foot/pageSize, align); s != nil {
		s.owner, s.req = owner, size
		publish(&s.state, spanLarge)
		h.unlock()
		if zero {
			h.zeroBlock(s.base, size)
		}
		return s.base, foot + descSize, false, nil
	}
	ch, first, fresh, err := h.allocPages(foot/pageSize, max(1, align/pageSize))
	if err != nil {
		h.unlock()
		return 0, 0, false, err
	}
	s := &span{chunk: ch, base: ch.base + first*pageSize, npages: foot / pageSize, size: foot, owner: owner, req: size}
	publish(&s.state, spanLarge)
	// Only the first page points at a large span: a valid Free names it,
	// and the page bitmap tells interior pointers from free pages.
	ch.pages[first].Store(s)
	h.unlock()
	if zero && !fresh {
		h.zeroBlock(s.base, size)
	}
	return s.base, foot + descSize, false, nil
}

// newRegion maps a huge region of foot bytes of its own. h.mu not held.
func (h *Heap) newRegion(foot, align uintptr) (*span, error) {
	p, err := h.src.Acquire(foot, max(align, chunkSize))
	if err != nil && h.giveIdle() { // as acquireChunk: what goes back may make room
		p, err = h.src.Acquire(foot, max(align, chunkSize))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: a %d-byte region: %w", ErrNoMemory, h.cfg.Name, foot, err)
	}
	ch := &chunk{heap: h, base: p, size: foot}
	s := &span{chunk: ch, base: p, npages: foot / pageSize, size: foot}
	ch.huge = s
	h.mu.Lock()
	h.mapped += foot
	h.nhuge++
	h.regions[s] = struct{}{}
	h.unlock()
	setGranules(p, foot, ch)
	return s, nil
}

// maxSpare bounds the bytes of freed medium spans a heap keeps whole.
const maxSpare = 16 << 20

// reuseSpare pops a kept medium span of exactly n pages aligned to align.
// h.mu held.
func (h *Heap) reuseSpare(n, align uintptr) *span {
	l := h.spare[n]
	for i := len(l) - 1; i >= 0; i-- {
		if s := l[i]; s.base&(align-1) == 0 {
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

// reuseHuge takes a region of the central list that fits foot bytes
// aligned to align (fitsHuge), the smallest. h.mu held.
func (h *Heap) reuseHuge(foot, align uintptr) *span {
	best := -1
	for i, s := range h.huge {
		if fitsHuge(s, foot, align) && (best < 0 || s.size < h.huge[best].size) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	s := h.huge[best]
	h.huge = append(h.huge[:best], h.huge[best+1:]...)
	h.unreserveKept(s.size)
	return s
}

// notAtBlock explains a pointer whose page starts no span: inside a large
// block, or in free pages.
func (h *Heap) notAtBlock(ch *chunk, p uintptr) error {
	h.mu.Lock()
	defer h.unlock()
	if ch.used&(1<<((p-ch.base)>>pageShift)) != 0 {
		return fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	return fmt.Errorf("%w: %#x is in free pages of heap %s", ErrForeign, p, h.cfg.Name)
}

// freeLarge frees the large block at p, whose span is s; the caller
// (Free) is pinned to P pid, and freeLarge unpins. Only the span (Go
// memory) is read, never the block's pages.
func (h *Heap) freeLarge(pid int, ch *chunk, s *span, p uintptr) (Block, *Tally, error) {
	if p != s.base {
		if s.state.Load() == spanMixed { // never at its base: blocks follow their headers
			return h.freeMixed(s, p) // unpins
		}
		pcpu.Unpin()
		return Block{}, nil, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	// The state change decides which of two racing frees wins.
	if !s.state.CompareAndSwap(spanLarge, spanRetained) {
		st := s.state.Load()
		pcpu.Unpin()
		if st == spanRetained || st == spanDead {
			return Block{}, nil, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
		}
		return Block{}, nil, fmt.Errorf("%w: %#x", ErrInvalid, p)
	}
	b := Block{Heap: h, Owner: s.owner, Size: s.req, Footprint: s.size + descSize}
	t := tallyOf(b.Owner) // before the block is counted out (see FreeCounted)
	if ch.huge != nil {
		h.freeHuge(pid, s, b, t) // unpins
		return b, t, nil
	}
	// A chunk the source gave only in part (a pinned-bytes limit below a
	// chunk) has too few pages to keep one whole for a block of its size:
	// its pages go back at once, for blocks of any size (see keepOrFree).
	if ch.resv == 0 && h.cacheSpan(pid, s, b, t) { // unpins
		return b, t, nil
	}
	if ch.resv != 0 {
		pcpu.Unpin()
	}
	if t != nil {
		t.CountFree(int64(b.Size), int64(b.Footprint))
	}
	h.mu.Lock()
	defer h.unlock()
	h.keepOrFree(s)
	return b, t, nil
}

// keepOrFree parks a freed large span (state retained) in the central
// spares, or gives its memory back. h.mu held.
func (h *Heap) keepOrFree(s *span) {
	closed := h.closed.Load()
	if s.chunk.huge == nil {
		// Not in a chunk usable only in part: kept whole, its pages would be
		// lost to blocks of every other size, and under a limit below one
		// chunk nothing else may be locked (issue 29: after one freed
		// 40,000-byte block a 64 KiB RLIMIT_MEMLOCK served no small block).
		if h.spareN+int(s.size) <= maxSpare && !closed && s.chunk.resv == 0 {
			// Keep the span whole for the next block of its size: no page
			// search, no new span, and for pinned heaps no relocking.
			h.spare[s.npages] = append(h.spare[s.npages], s)
			h.spareN += int(s.size)
			return
		}
		h.freeSpan(s)
		return
	}
	if keep := h.keepHuge.Load(); s.size <= keep && !closed {
		// The region just freed is the likeliest to be asked for again (a
		// loop of big buffers): make room by releasing the oldest kept.
		// What P caches keep and their credit count too (h.kept); a P
		// gives its own back when it needs room (freeHugeRare), Trim
		// every P's.
		for !h.reserveKept(s.size, keep) {
			if len(h.huge) == 0 {
				h.releaseHuge(s)
				return
			}
			old := h.huge[0]
			h.huge = append(h.huge[:0], h.huge[1:]...)
			h.unreserveKept(old.size)
			h.releaseHuge(old)
		}
		h.huge = append(h.huge, s)
		return
	}
	h.releaseHuge(s)
}

// cacheSpan keeps a freed medium span in P pid's cache and counts b out of
// t there, in the pinned section the caller began; it unpins. False: not
// kept, not counted.
func (h *Heap) cacheSpan(pid int, s *span, b Block, t *Tally) bool {
	cs := *h.caches.Load()
	if pid >= len(cs) || h.closed.Load() { // closed after the caches: see cacheHuge
		pcpu.Unpin()
		return false
	}
	pc := cs[pid]
	pc.guard.Lock()
	ok := pc.nspans < len(pc.spans)
	counted := t == nil
	if ok {
		pc.spans[pc.nspans] = s
		pc.nspans++
		if !counted {
			counted, _ = t.countPinned(pid, false, int64(b.Size), int64(b.Footprint))
		}
	}
	pc.guard.Unlock()
	pcpu.Unpin()
	if ok && !counted {
		t.CountFree(int64(b.Size), int64(b.Footprint))
	}
	return ok
}

// takeCachedSpan takes a cached medium span of n pages aligned to align
// from the current P's cache and counts a block of size bytes in t there.
func (h *Heap) takeCachedSpan(n, align, size uintptr, t *Tally) *span {
	pid := pcpu.Pin()
	cs := *h.caches.Load()
	if pid >= len(cs) {
		pcpu.Unpin()
		return nil
	}
	pc := cs[pid]
	pc.guard.Lock()
	s := pc.takeSpan(n, align)
	counted, sample := t == nil, false
	if s != nil && !counted {
		counted, sample = t.countPinned(pid, true, int64(size), int64(s.size+descSize))
	}
	pc.guard.Unlock()
	pcpu.Unpin()
	if s != nil && !counted {
		t.CountAlloc(int64(size), int64(s.size+descSize))
	} else if sample {
		t.SamplePeak()
	}
	return s
}

// takeSpan removes and returns a cached span of n pages aligned to align,
// or nil. The caller is pinned to pc's P and holds its guard.
func (pc *pcache) takeSpan(n, align uintptr) *span {
	for i := pc.nspans - 1; i >= 0; i-- {
		if c := pc.spans[i]; c.npages == n && c.base&(align-1) == 0 {
			pc.nspans--
			pc.spans[i] = pc.spans[pc.nspans]
			pc.spans[pc.nspans] = nil
			return c
		}
	}
	return nil
}

func (h *Heap) releaseHuge(s *span) {
	s.state.Store(spanDead)
	h.nhuge--
	delete(h.regions, s)
	setGranules(s.base, s.size, nil)
	h.doom(doomedRange{base: s.base, size: s.size, mapped: s.size, huge: true})
}
