package heap

// Mixed spans: small blocks of every size class sharing pages first fit, in
// a chunk the source made usable only in part (a PartialSource: a pinned
// heap under a pinned-bytes limit below a chunk).
//
// A span of one size class takes at least a 64 KiB page, so under a 64 KiB
// limit (Docker's default `ulimit -l` for years) the first class took all
// there was and a block of a second size was refused with ~62 KiB free
// (issue 23). There, small blocks go to mixed spans instead: a run of the
// chunk's usable pages whose free bytes are a list of extents, carved
// first fit under h.mu. A block has the slot of its size class (so its
// footprint, and every quota, is what Footprint says) and the usual header,
// and never enters the per-P caches: Alloc reaches it through refill, Free
// through freeLarge's check of the span's state, both off the paths of
// chunks used whole. Everything about a mixed block is decided under h.mu,
// with its span's state still spanMixed: the chunk is then in the table and
// mapped.

import (
	"fmt"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// mixed is a mixed span's bookkeeping. h.mu guards it.
type mixed struct {
	free []extent               // free bytes [lo, hi), in address order, never adjacent
	live map[uintptr]mixedBlock // by user pointer
}

type extent struct{ lo, hi uintptr }

// mixedBlock is a live block of a mixed span: its slot and footprint.
type mixedBlock struct{ slot, foot uintptr }

// spanEnd is where the span's pages end.
func (s *span) spanEnd() uintptr { return s.base + s.npages*pageSize }

// take carves foot bytes whose start is 8 past a multiple of align (a
// power of two ≥ 16: the slot rule of classed spans, see offFor), first
// fit, and returns the start.
func (m *mixed) take(foot, align uintptr) (uintptr, bool) {
	for i, e := range m.free {
		q := roundUp(e.lo-hdrSize, align) + hdrSize
		if q+foot > e.hi {
			continue
		}
		switch {
		case q == e.lo && q+foot == e.hi:
			m.free = append(m.free[:i], m.free[i+1:]...)
		case q == e.lo:
			m.free[i].lo = q + foot
		case q+foot == e.hi:
			m.free[i].hi = q
		default: // alignment left a gap before it: two extents
			m.free = append(m.free, extent{})
			copy(m.free[i+1:], m.free[i:])
			m.free[i].hi, m.free[i+1].lo = q, q+foot
		}
		return q, true
	}
	return 0, false
}

// give returns [lo, hi) to the free extents, merged with its neighbours.
func (m *mixed) give(lo, hi uintptr) {
	i := 0
	for i < len(m.free) && m.free[i].lo < lo {
		i++
	}
	if i > 0 && m.free[i-1].hi == lo {
		i--
		lo = m.free[i].lo
		m.free = append(m.free[:i], m.free[i+1:]...)
	}
	if i < len(m.free) && m.free[i].lo == hi {
		hi = m.free[i].hi
		m.free = append(m.free[:i], m.free[i+1:]...)
	}
	m.free = append(m.free, extent{})
	copy(m.free[i+1:], m.free[i:])
	m.free[i] = extent{lo, hi}
}

// allocMixed carves a block of class c, aligned to align, from a mixed
// span, making or growing one from the usable pages of chunks the source
// gave in part, or from a new chunk. It returns the slot: handOut writes
// the header as for a classed slot. h.mu held.
func (h *Heap) allocMixed(c int, align uintptr) (uintptr, error) {
	foot := classSize[c]
	align = max(align, minAlign)
	for _, s := range h.mixed {
		if slot, ok := h.takeMixed(s, foot, align); ok {
			return slot, nil
		}
	}
	// Grow a span into the free page after it: the block may need more
	// room than any span's free extents give, and neighbours merge.
	for _, s := range h.mixed {
		ch := s.chunk
		if i := (s.spanEnd() - ch.base) >> pageShift; i < pagesPerChunk && ch.used&(1<<i) == 0 {
			h.takePages(ch, 1<<i)
			ch.pages[i].Store(s)
			s.npages++
			s.mix.give(ch.base+i*pageSize, s.spanEnd())
			if slot, ok := h.takeMixed(s, foot, align); ok {
				return slot, nil
			}
		}
	}
	// A new span on a free usable page of a chunk given in part.
	var ch *chunk
	first := uintptr(0)
	for _, c := range h.chunks {
		if c.resv == 0 || c.used == ^uint64(0) {
			continue
		}
		for i := uintptr(0); i < pagesPerChunk; i++ {
			if c.used&(1<<i) == 0 {
				ch, first = c, i
				break
			}
		}
		if ch != nil {
			break
		}
	}
	if ch == nil {
		p, usable, err := h.acquireChunk(pageSize)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: a %d-byte chunk: %w", ErrNoMemory, h.cfg.Name, chunkSize, err)
		}
		ch = h.addChunk(p, usable)
	}
	h.takePages(ch, 1<<first)
	s := &span{chunk: ch, base: ch.base + first*pageSize, npages: 1, mix: &mixed{live: map[uintptr]mixedBlock{}}}
	s.mix.free = []extent{{s.base + hdrSize, s.spanEnd()}}
	s.state.Store(spanMixed)
	ch.pages[first].Store(s)
	h.mixed = append(h.mixed, s)
	slot, _ := h.takeMixed(s, foot, align) // a page holds any small block: slots are ≤ 32 KiB
	return slot, nil
}

// takeMixed carves a block in s and records it live. h.mu held.
func (h *Heap) takeMixed(s *span, foot, align uintptr) (uintptr, bool) {
	slot, ok := s.mix.take(foot, align)
	if ok {
		// Until handOut writes its header the block's tag is not live, so
		// a stale free of the same address is a double free meanwhile.
		s.mix.live[slot+offFor(align)] = mixedBlock{slot, foot}
	}
	return slot, ok
}

// mixedState says whether p is the user pointer of a live block of mixed
// span s (its record), as smallState does for classed spans. h.mu held,
// s.state spanMixed.
func mixedState(s *span, p uintptr) (mixedBlock, int) {
	if b, ok := s.mix.live[p]; ok && atomic.LoadUint32(&hdr(p).tag) == tag(magicLive, p-b.slot) {
		return b, smallLive
	}
	for _, b := range s.mix.live {
		if b.slot <= p && p < b.slot+b.foot {
			return mixedBlock{}, smallInside
		}
	}
	if p%minAlign == 0 && p >= s.base+2*hdrSize && p < s.spanEnd() && atomic.LoadUint32(&hdr(p).tag)>>16 == magicFree {
		return mixedBlock{}, smallFreed
	}
	return mixedBlock{}, smallInside
}

// freeMixed frees p, a pointer into mixed span s of chunk ch; the caller
// (Free) is pinned, and freeMixed unpins.
func (h *Heap) freeMixed(s *span, p uintptr) (Block, *Tally, error) {
	pcpu.Unpin()
	h.mu.Lock()
	defer h.unlock()
	if s.state.Load() != spanMixed {
		// Its last block was freed since Free found it, and its pages may
		// be gone: p was freed before.
		return Block{}, nil, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	b, st := mixedState(s, p)
	if st != smallLive || !atomic.CompareAndSwapUint32(&hdr(p).tag, tag(magicLive, p-b.slot), tag(magicFree, p-b.slot)) {
		if st == smallLive {
			st = smallFreed
		}
		return Block{}, nil, smallErr(st, p)
	}
	hd := hdr(p)
	blk := Block{Heap: h, Owner: hd.owner(), Size: hd.size(), Footprint: b.foot}
	t := tallyOf(blk.Owner) // before the block is counted out (see FreeCounted)
	if t != nil {
		t.CountFree(int64(blk.Size), int64(blk.Footprint))
	}
	delete(s.mix.live, p)
	s.mix.give(b.slot, b.slot+b.foot)
	if len(s.mix.live) == 0 {
		for i, m := range h.mixed {
			if m == s {
				h.mixed = append(h.mixed[:i], h.mixed[i+1:]...)
				break
			}
		}
		h.freeSpan(s)
	}
	return blk, t, nil
}

// inspectMixed is Inspect and Room for p in mixed span s: the block, and
// the bytes usable from p where it lies.
func (h *Heap) inspectMixed(s *span, p uintptr) (Block, uintptr, error) {
	h.mu.Lock()
	defer h.unlock()
	if s.state.Load() != spanMixed {
		return Block{}, 0, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	b, st := mixedState(s, p)
	if st != smallLive {
		return Block{}, 0, smallErr(st, p)
	}
	hd := hdr(p)
	return Block{Heap: h, Owner: hd.owner(), Size: hd.size(), Footprint: b.foot}, b.slot + b.foot - p, nil
}

// resizeMixed records size for the live block p of mixed span s when its
// slot has room. h.mu not held.
func (h *Heap) resizeMixed(s *span, p, size uintptr) error {
	h.mu.Lock()
	defer h.unlock()
	if s.state.Load() != spanMixed {
		return fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	b, st := mixedState(s, p)
	if st != smallLive {
		return smallErr(st, p)
	}
	if size > b.slot+b.foot-p {
		return fmt.Errorf("%w: %d bytes do not fit the block at %#x", ErrTooLarge, size, p)
	}
	hdr(p).setSize(size)
	return nil
}

// containingMixed is containingSmall for a mixed span. h.mu held.
func containingMixed(s *span, p uintptr) (start, size uintptr, ok bool) {
	if b, ok := s.mix.live[p]; ok { // at a block's start: the common case
		return containingMixedBlock(p, b, p)
	}
	for q, b := range s.mix.live {
		if b.slot <= p && p < b.slot+b.foot {
			return containingMixedBlock(q, b, p)
		}
	}
	return 0, 0, false
}

// containingMixedBlock is containingMixed for p in the slot of the block at
// q.
func containingMixedBlock(q uintptr, b mixedBlock, p uintptr) (start, size uintptr, ok bool) {
	hd := hdr(q)
	if atomic.LoadUint32(&hd.tag) != tag(magicLive, q-b.slot) {
		return 0, 0, false // being handed out
	}
	if n := uintptr(atomic.LoadUint32(&hd.meta) & 0xffff); q <= p && p-q < n {
		return q, n, true
	}
	return 0, 0, false // its header, padding, or past its size
}
