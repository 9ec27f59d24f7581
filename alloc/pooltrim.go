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
	var pps []*pinnedPool
	for k, pp := range pinnedPools {
		if k.dev == dev {
			pps = append(pps, pp) // its own, and those bound to a memory space's nodes
		}
	}
	pinnedMu.Unlock()
	var n uintptr
	for _, pp := range pps {
		n += trimPool(pp)
	}
	return n
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

// TrimSharedPool gives back the idle memory of the pool a draws from and
// returns the bytes released. No allocator has a pool of its own: a pinned
// allocator draws on its device's pinned pool (pin_device, else the
// default device when it was made), which every pinned allocator of that
// device shares whatever its other traits, so this is TrimPinnedPool of
// that device, and it gives back what the other allocators of the device
// cached too (never a live block). A host allocator's pool is its heap:
// the host heap every plain host allocator shares, or the heap of its NUMA
// placement. Target memory spaces cache nothing here and release nothing.
// Like Trim it costs a garbage-collection cycle.
func (a *Allocator) TrimSharedPool() uintptr {
	if pp := a.pinnedPool(); pp != nil {
		return trimPool(pp)
	}
	if a.pool != nil {
		return trimPool(a.pool)
	}
	if a.heap != nil {
		return a.heap.Trim()
	}
	return 0
}

// SharedPool returns the statistics of the pinned pool a draws from, the
// pool TrimSharedPool trims (FreeBlocks is CuPy's n_free_blocks for it),
// and false for an allocator of unpinned memory. The pool is its device's,
// shared by every pinned allocator of the device: PinnedPool(dev) says the
// same.
func (a *Allocator) SharedPool() (PoolStats, bool) {
	pp := a.pinnedPool()
	if pp == nil {
		return PoolStats{}, false
	}
	return poolStatsLocked(pp), true
}

// pinnedPool returns the device pinned pool a draws from, or nil.
func (a *Allocator) pinnedPool() *pinnedPool {
	if a.pool != nil && isPinnedHeap(a.pool.heaps[0]) {
		return a.pool
	}
	if isPinnedHeap(a.heap) {
		return pinnedPoolOf(a.heap)
	}
	return nil
}
