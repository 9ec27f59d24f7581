package alloc

// Per-pool control: trimming one device's pinned pool, or the heap one
// allocator draws from, instead of every heap (Trim).

// TrimPinnedPool gives device dev's pinned pool's cached memory back (empty
// chunks unlocked and unmapped, freed huge regions and spare pages
// released; CuPy's free_all_blocks for one pool) and leaves every other
// pool alone. It returns the bytes released; a device without a pinned
// pool releases nothing. Like Trim it costs a garbage-collection cycle.
func TrimPinnedPool(dev int) uintptr {
	pinnedMu.Lock()
	pp := pinnedPools[dev]
	pinnedMu.Unlock()
	if pp == nil {
		return 0
	}
	return trimPool(pp)
}

func trimPool(pp *pinnedPool) uintptr {
	var n uintptr
	for _, h := range pp.heaps {
		n += h.Trim()
	}
	for _, s := range pp.srcs {
		s.retry()
	}
	return n
}

// TrimPool trims the memory a draws from and returns the bytes released:
// for a pinned allocator its device's pinned pool (shared by every pinned
// allocator of that device), for a host allocator its heap (the shared
// host heap, or the heap of its NUMA placement). Target memory spaces cache
// nothing here and release nothing.
func (a *Allocator) TrimPool() uintptr {
	if a.pool != nil {
		return trimPool(a.pool)
	}
	if a.heap != nil {
		return a.heap.Trim()
	}
	return 0
}
