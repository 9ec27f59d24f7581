package heap

import "fmt"

// AllocFresh is AllocCounted for a block that must not land in a kept huge
// region larger than it needs: a huge block gets a region of its own size,
// newly mapped; any other block is served as AllocCounted serves it. A
// pool_size quota counts what a block occupies, and a kept region may be up
// to a quarter larger than the block: the allocator that cannot be charged
// that much asks again here rather than refusing a block that fits.
func (h *Heap) AllocFresh(size, align uintptr, owner uint32, zero bool, t *Tally) (p, footprint uintptr, err error) {
	if align < minAlign {
		align = minAlign
	}
	if size > maxAlloc || align > maxAlloc {
		return 0, 0, fmt.Errorf("%w: %d bytes aligned to %d", ErrTooLarge, size, align)
	}
	foot := roundUp(max(size, 1), pageSize)
	if classFor(max(size, 1)+offFor(align), align) >= 0 || foot <= maxMedium && align <= maxMedium {
		return h.AllocCounted(size, align, owner, zero, t)
	}
	if h.sizer != nil {
		foot = max(foot, h.sizer.RegionSize(foot))
	}
	if h.closed.Load() {
		return 0, 0, ErrClosed
	}
	s, err := h.newRegion(foot, align)
	if err != nil {
		return 0, 0, err
	}
	h.noteTook()
	s.owner, s.req = owner, size
	publish(&s.state, spanLarge)
	if t != nil {
		t.CountAlloc(int64(size), int64(s.size+descSize))
	}
	return s.base, s.size + descSize, nil
}
