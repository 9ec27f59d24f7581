package heap

// Finding the live block an address points into, for bounds checks on
// copies that start inside a block (omp_target_memcpy with a pointer plus
// an offset).

import "sync/atomic"

// Containing returns the live block [start, start+size) that p points into,
// at its start or anywhere inside. ok is false for an address no heap
// mapped, in free pages or a free slot, in a small block's header or
// alignment padding, or past a block's requested size. It holds the heap's
// lock while it reads a slot's header, so that the chunk cannot be returned
// to the source (unmapped) under it; the header is read with atomic loads,
// as Inspect does, so a racing Free makes the answer stale, never a fault.
// A forged header inside a freed block's old bytes can be believed, as in
// Free (RELIABILITY.md).
func Containing(p uintptr) (start, size uintptr, ok bool) {
	for range 4 { // the chunk can be released and its granules reused between lookup and lock
		ch := lookup(p)
		if ch == nil {
			return 0, 0, false
		}
		h := ch.heap
		h.mu.Lock()
		if lookup(p) != ch {
			h.mu.Unlock()
			continue
		}
		start, size, ok = containingLocked(ch, p)
		h.mu.Unlock()
		return start, size, ok
	}
	return 0, 0, false
}

// containingLocked is Containing for p in chunk ch. ch.heap.mu held.
func containingLocked(ch *chunk, p uintptr) (start, size uintptr, ok bool) {
	s := ch.huge
	if s == nil {
		// Small and mixed spans point every page at themselves, large spans only
		// their first: the nearest span at or before p's page is the
		// only one that can hold p.
		for i := int((p - ch.base) >> pageShift); i >= 0 && s == nil; i-- {
			s = ch.pages[i].Load()
		}
		if s == nil || p-s.base >= s.npages*pageSize {
			return 0, 0, false // free pages
		}
	}
	switch s.state.Load() {
	case spanLarge:
		// req was written before the state store that the load above saw.
		if p-s.base < s.req {
			return s.base, s.req, true
		}
	case spanSmall:
		return containingSmall(s, p)
	case spanMixed:
		return containingMixed(s, p)
	}
	return 0, 0, false // a freed large block kept for reuse, or past its size
}

// containingSmall finds the live block of p's slot in small span s. A
// block sits at offset 8 of its slot or at its alignment less 8 (offFor);
// the lowest live offset is the block, as a higher "live" tag could only be
// the block's own data. A slot handed out at an offset above 8 has usedMark
// in its first word, which no live tag equals.
func containingSmall(s *span, p uintptr) (start, size uintptr, ok bool) {
	first := s.base + hdrSize
	if p < first {
		return 0, 0, false
	}
	i := uintptr(uint64(p-first) * s.divMul >> divShift)
	if i >= uintptr(s.nslots) {
		return 0, 0, false // the span's unused tail
	}
	slot := first + i*s.size
	for align := uintptr(minAlign); offFor(align) < s.size; align *= 2 {
		off := offFor(align)
		if slot+off > p {
			break // a block starting here or later cannot hold p
		}
		hd := hdr(slot + off)
		if atomic.LoadUint32(&hd.tag) != tag(magicLive, off) {
			continue
		}
		n := uintptr(atomic.LoadUint32(&hd.meta) & 0xffff)
		if off+n > s.size {
			return 0, 0, false // not a header the heap wrote
		}
		if p-(slot+off) < n {
			return slot + off, n, true
		}
		return 0, 0, false // past the requested size
	}
	return 0, 0, false // a free slot, or its header or padding
}
