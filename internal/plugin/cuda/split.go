package cuda

import (
	"slices"
	"sort"
)

// Copies are split at registration boundaries. The note on every copy
// function of the driver API: "Memory regions requested must be either
// entirely registered with CUDA, or in the case of host pageable transfers,
// not registered at all. Memory regions spanning over allocations that are
// both registered and not registered with CUDA are not supported and will
// return CUDA_ERROR_INVALID_VALUE." Nothing promises either that one copy
// may run from one registration into the next (two adjacent locks, the
// 64 GiB pieces of one lock). So a copy whose host range crosses the edge
// of a registration made here is issued as one copy per part: each part
// lies in one registration piece or in none (the AMD plugin splits at its
// lock table's edges the same way). Registrations made outside ompalloc are
// not looked for: a copy over part of one is the driver's to refuse.

// publishLocked rebuilds the sorted list of registered pieces that copies
// read without a lock (registering is rare: once per pinned chunk). rs.mu
// held.
func (rs *registrations) publishLocked() {
	ps := make([]piece, 0, len(rs.spans))
	for start, size := range rs.spans {
		ps = append(ps, piece{start, size})
	}
	slices.SortFunc(ps, func(a, b piece) int {
		switch {
		case a.host < b.host:
			return -1
		case a.host > b.host:
			return 1
		}
		return 0
	})
	rs.sorted.Store(&ps)
}

// cut splits host range [p, p+n) at the edges of the registered pieces it
// touches. nil: one part, the whole range (no registration made here
// touches it, or one holds it all): the common case costs an atomic load
// and a binary search.
func (rs *registrations) cut(p, n uintptr) []piece {
	sp := rs.sorted.Load()
	if sp == nil || len(*sp) == 0 || n == 0 {
		return nil
	}
	s, end := *sp, p+n
	i := sort.Search(len(s), func(i int) bool { return s[i].host+s[i].size > p })
	if i == len(s) || s[i].host >= end || (s[i].host <= p && end <= s[i].host+s[i].size) {
		return nil
	}
	var out []piece
	q := p
	for ; i < len(s) && s[i].host < end; i++ {
		if s[i].host > q {
			out = append(out, piece{q, s[i].host - q})
			q = s[i].host
		}
		e := min(end, s[i].host+s[i].size)
		out = append(out, piece{q, e - q})
		q = e
	}
	if q < end {
		out = append(out, piece{q, end - q})
	}
	return out
}
