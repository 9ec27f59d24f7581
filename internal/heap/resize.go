package heap

// Resizing a block where it lies, for Arrow-style reallocators and
// alloc.Resize: a block's slot or pages often have room beyond the size
// asked, and using it saves a copy.

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// Room returns the live block at p and the bytes usable from p without
// moving it: its slot less the header offset (small blocks) or its pages
// (large ones). It validates p as Inspect does.
func Room(p uintptr) (Block, uintptr, error) {
	pcpu.Pin() // the chunk stays mapped while the header is read (see Free)
	ch := lookup(p)
	if ch == nil {
		pcpu.Unpin()
		return Block{}, 0, fmt.Errorf("%w: %#x", ErrForeign, p)
	}
	h := ch.heap
	s := ch.spanAt(p)
	if s == nil {
		pcpu.Unpin()
		return Block{}, 0, h.notAtBlock(ch, p)
	}
	st := s.state.Load()
	if st == spanSmall {
		slot, bad := smallState(s, p)
		var b Block
		if bad == smallLive {
			hd := hdr(p)
			b = Block{Heap: h, Owner: hd.owner(), Size: hd.size(), Footprint: s.size}
		}
		pcpu.Unpin()
		if bad != smallLive {
			return Block{}, 0, smallErr(bad, p)
		}
		return b, slot + s.size - p, nil
	}
	pcpu.Unpin()
	switch st {
	case spanLarge:
		h.mu.Lock()
		defer h.mu.Unlock()
		if p != s.base || s.state.Load() != spanLarge {
			return Block{}, 0, fmt.Errorf("%w: %#x", ErrInvalid, p)
		}
		return Block{Heap: h, Owner: s.owner, Size: s.req, Footprint: s.size + descSize}, s.size, nil
	case spanMixed:
		return h.inspectMixed(s, p)
	}
	return Block{}, 0, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
}

// Resize records size as the requested size of the live block at p when
// the block has room for it where it lies (0 < size <= Room), and reports
// whether it did; old describes the block before. The footprint does not
// change, nor does any byte of the block: bytes beyond the old size are
// whatever the slot held, so a caller promising zeroed memory clears them.
// Like Free, it must not race with a Free of the same block.
func Resize(p, size uintptr) (old Block, ok bool, err error) {
	old, room, err := Room(p)
	if err != nil || size == 0 || size > room {
		return old, false, err
	}
	ch := lookup(p)
	h := ch.heap
	s := ch.spanAt(p)
	switch s.state.Load() {
	case spanSmall:
		hdr(p).setSize(size) // room < 32 KiB: small blocks' slots
		return old, true, nil
	case spanMixed:
		if err := h.resizeMixed(s, p, size); err != nil {
			return old, false, err
		}
		return old, true, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p != s.base || s.state.Load() != spanLarge { // freed since Room: the caller raced a Free
		return old, false, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	s.req = size
	return old, true, nil
}

// ResizeInClass is Resize for realloc: it resizes only when a fresh
// Alloc(size, align) would occupy exactly what the block occupies now (the
// same size class, or the same run of pages) and p has that alignment, so
// that a realloc that shrinks to a smaller class still moves and gives the
// slot back. Like Resize it counts nothing: the caller updates the owner's
// tally.
func ResizeInClass(p, size, align uintptr) (old Block, ok bool, err error) {
	if align < minAlign {
		align = minAlign
	}
	if old, err = Inspect(p); err != nil {
		return Block{}, false, err
	}
	if size == 0 || size > maxAlloc || p&(align-1) != 0 {
		return old, false, nil
	}
	ch := lookup(p)
	h := ch.heap
	s := ch.spanAt(p)
	if s.state.Load() == spanMixed {
		return old, false, nil // moves: blocks there are few and short-lived
	}
	if s.state.Load() == spanSmall {
		hd := hdr(p)
		off := uintptr(hd.tag & 0xffff)
		// It must fit after its offset, and a fresh block would be of this
		// class (a shrink to a smaller class moves, to give the slot back).
		if off+size > s.size || classFor(size+offFor(align), align) != s.class {
			return old, false, nil
		}
		hd.setSize(size)
	} else {
		if classFor(max(size, 1)+offFor(align), align) >= 0 {
			return old, false, nil // would be a small block
		}
		foot := roundUp(size, pageSize)
		if ch.huge == nil && foot != s.size || ch.huge != nil && (foot > s.size || s.size-foot > foot/4) {
			return old, false, nil
		}
		h.mu.Lock()
		if s.state.Load() != spanLarge || p != s.base {
			h.mu.Unlock()
			return old, false, nil // freed meanwhile: the caller's race, not ours to hide
		}
		s.req = size
		h.mu.Unlock()
	}
	return old, true, nil
}
