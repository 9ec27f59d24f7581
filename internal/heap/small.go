package heap

// Small blocks: size-class slots served from per-P caches, refilled and
// spilled in batches from the central lists of partial spans.

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// refill takes a batch of slots from the central lists, returns one and
// caches the rest on the current P; or, where the pages are shared by
// every class (mixed.go), returns a block's slot of its own, aligned to
// align.
func (h *Heap) refill(c int, align uintptr) (uintptr, error) {
	h.mu.Lock()
	if h.closed.Load() {
		h.unlock()
		return 0, ErrClosed
	}
	if n := runtime.GOMAXPROCS(0); n > len(*h.caches.Load()) {
		h.growCaches(n)
	}
	head, tail, n, err := h.takeSlots(c, int(classCap[c]/2))
	if err == errUseMixed {
		slot, err := h.allocMixed(c, align)
		h.unlock()
		return slot, err
	}
	h.unlock()
	if err != nil {
		return 0, err
	}
	first, rest := head, link(head)
	if n--; n == 0 {
		return first, nil
	}
	if pc := h.cacheOf(pcpu.Pin()); pc != nil {
		l := &pc.lists[c]
		setLink(tail, l.head)
		l.head = rest
		l.n += int32(n)
		pc.unpin()
		return first, nil
	}
	pcpu.Unpin()
	h.mu.Lock()
	h.returnList(rest)
	h.unlock()
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
	// Fewer pages (one slot) will do where no new chunk can be had and a
	// chunk used whole has that much room; a chunk the source made usable
	// only in part (a pinned heap whose limit lets it lock less than a
	// chunk) is left to mixed spans (mixed.go).
	ch, first, fresh, np, err := h.allocPagesOr(classPages[c], classMinPages[c], 1, true)
	if err != nil {
		return nil, err
	}
	s := &span{chunk: ch, base: ch.base + first*pageSize, npages: np, class: c, size: classSize[c], divMul: classDivMul[c], cap: classCap[c]}
	s.zeroed = fresh
	s.nslots = uint32((np*pageSize - hdrSize) / s.size)
	s.nfree = s.nslots
	s.fresh = s.base + hdrSize // slots start 8 past a 16-byte boundary
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

// What smallState finds at p.
const (
	smallLive   = iota // the user pointer of a live block
	smallFreed         // a freed block's start: a double free
	smallInside        // not a block's start (inside one, or misaligned)
)

// smallState says whether p is the user pointer of a live slot of s, and
// that slot. It reads the slot's headers and allocates nothing, so that
// callers can run it pinned (see Free); smallErr makes its answer an error.
func smallState(s *span, p uintptr) (slot uintptr, st int) {
	if p%minAlign != 0 { // every block is 16-aligned; and the header read below must be aligned
		return 0, smallInside
	}
	first := s.base + hdrSize
	if p < first {
		return 0, smallInside
	}
	rel := uint64(p - first) // < 1 MiB: p is in one of the span's pages
	slot = first + uintptr(rel*s.divMul>>divShift)*s.size
	off := p - slot
	if off < hdrSize {
		return 0, smallInside
	}
	hd := hdr(p)
	t := atomic.LoadUint32(&hd.tag)
	m := t >> 16
	if t == tag(magicLive, off) {
		return slot, smallLive
	}
	// Not a live block's start. A slot reused at a smaller offset keeps the
	// freed header of its earlier block inside the new block's bytes, so a
	// free magic at p-16 is a double free only if no live block of the slot
	// starts before p; if one does, p points inside it.
	if m == magicFree && !liveBefore(slot, p) {
		return 0, smallFreed
	}
	return 0, smallInside
}

// smallErr is the error for what smallState found (nil for a live block).
func smallErr(st int, p uintptr) error {
	switch st {
	case smallLive:
		return nil
	case smallFreed:
		return fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	return fmt.Errorf("%w: %#x", ErrInvalid, p)
}

// checkSmall validates that p is the user pointer of a live slot of s. The
// caller keeps the chunk mapped (pinned, or under h.mu with the chunk
// still in the table).
func checkSmall(s *span, p uintptr) (slot uintptr, err error) {
	slot, st := smallState(s, p)
	return slot, smallErr(st, p)
}

// liveBefore reports whether a live block of the slot starts before p. A
// block starts at offset 8 or at its alignment less 8 (offFor: 24, 56, ...).
// Only error paths call it.
func liveBefore(slot, p uintptr) bool {
	for align := uintptr(minAlign); slot+offFor(align) < p; align *= 2 {
		off := offFor(align)
		if atomic.LoadUint32(&hdr(slot+off).tag) == tag(magicLive, off) {
			return true
		}
	}
	return false
}

// freeSlot puts a freed slot in the current P's cache and counts the block
// (size bytes asked, foot bytes of the heap) out of tally t, in the pinned
// section Free began on P pid; it unpins. It takes the block's fields, not
// the Block: a Block argument beside the others does not fit the argument
// registers, and Free then builds and copies it in memory (+46 instructions
// per 64 B alloc+free, cachegrind).
func (h *Heap) freeSlot(pid, c int, slot uintptr, t *Tally, size, foot uintptr) {
	cs := *h.caches.Load()
	if pid >= len(cs) {
		pcpu.Unpin()
		h.mu.Lock()
		setLink(slot, 0)
		h.returnList(slot)
		h.unlock()
		if t != nil {
			t.CountFree(int64(size), int64(foot))
		}
		return
	}
	pc := cs[pid]
	pc.guard.Lock()
	counted := t == nil
	if !counted {
		counted, _ = t.countPinned(pid, false, int64(size), int64(foot))
	}
	l := &pc.lists[c]
	setLink(slot, l.head)
	l.head = slot
	l.n++
	if l.n <= classCap[c] {
		pc.guard.Unlock()
		pcpu.Unpin()
		if !counted {
			t.CountFree(int64(size), int64(foot))
		}
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
	if !counted {
		t.CountFree(int64(size), int64(foot))
	}
	h.mu.Lock()
	h.returnList(head)
	h.unlock()
}

// usedMark is written in the first word of a slot handed out at an offset
// above 8 (where that word is padding; at offset 8 the header's tag is
// there), so that a zero first word means the slot was never handed out.
const usedMark = 0x4f4d5055 // "UPMO"

// neverUsed reports whether the slot, about to be handed out, holds only
// zero bytes after its header: no block ever had it (its first word is
// zero; see usedMark) and its span was cut from pages fresh from the source
// (zero-filled, never used since). Calloc then need not clear it. Only
// calloc's path asks.
func neverUsed(slot uintptr) bool {
	if *(*uint32)(cmem.Ptr(slot)) != 0 {
		return false
	}
	ch := lookup(slot)
	s := ch.pages[(slot-ch.base)>>pageShift].Load()
	return s.zeroed
}

// zeroBlock clears a block for a zero request. A heap whose countZeroed
// is set (by tests, before its first Alloc) counts the bytes it cleared, so
// that tests can check memory fresh from the source is not cleared again;
// other heaps pay no counter.
func (h *Heap) zeroBlock(p, n uintptr) {
	cmem.Zero(p, n)
	if h.countZeroed {
		h.zeroedBytes.Add(uint64(n))
	}
}
