package heap

// Giving memory back, and what a heap holds.

import (
	"runtime"
)

// Trim drains every P's cache into the central lists and returns empty
// chunks and retained regions to the source. It returns the bytes released.
//
// Draining uses a grace period, as RCU does: Trim installs fresh caches,
// then waits for a stop-the-world (runtime.GC has one), which cannot happen
// while any goroutine is pinned. After it, no goroutine can still be inside
// an old cache, and Trim owns them. Trim therefore costs a GC cycle; it is
// meant for rare calls (DestroyAllocator, idle periods, tests).
func (h *Heap) Trim() uintptr {
	released := h.trim()
	h.WaitReleases() // the chunks it let go, and any a Free let go before
	return released
}

func (h *Heap) trim() uintptr {
	h.drainMu.Lock() // the old caches are ours alone, not drainCaches' too
	defer h.drainMu.Unlock()
	h.mu.Lock()
	old := *h.caches.Load()
	fresh := make([]*pcache, len(old))
	for i := range fresh {
		fresh[i] = new(pcache)
	}
	h.caches.Store(&fresh)
	h.unlock()
	runtime.GC()
	h.mu.Lock()
	defer h.unlock() // with the grace period for the chunks let go (giveback.go)
	for _, pc := range old {
		pc.guard.Lock() // uncontended: the grace period made the old caches ours
		for _, l := range pc.lists {
			h.returnList(l.head)
		}
		for _, s := range pc.spans[:pc.nspans] {
			h.keepOrFree(s)
		}
		h.drainRegions(pc)
		pc.guard.Unlock()
	}
	h.dropSpare()
	for _, s := range h.huge {
		h.unreserveKept(s.size)
		h.releaseHuge(s)
	}
	h.huge = nil
	for i := len(h.chunks) - 1; i >= 0; i-- {
		if ch := h.chunks[i]; ch.used == ch.resv {
			h.releaseChunk(ch)
		}
	}
	var released uintptr // all of h.doomed: unlock gave back the earlier ones
	for _, r := range h.doomed {
		released += r.mapped
	}
	return released
}

// Close trims the heap and refuses further allocation. Blocks still live
// stay valid until freed; their memory returns to the source as it empties.
//
// closed is set before the trim: a free that caches a span or region loads
// the caches, then closed (cacheHuge), so one that still kept something
// did so in a cache the trim takes and drains.
func (h *Heap) Close() {
	h.mu.Lock()
	h.closed.Store(true)
	h.cfg.KeepChunks, h.cfg.KeepHuge = 0, 0
	h.keepHuge.Store(0)
	h.unlock()
	h.Trim()
}

// Stats describes what a heap holds.
type Stats struct {
	Mapped      uintptr // bytes held from the source
	Chunks      int     // 4 MiB chunks
	EmptyChunks int     // of which hold no block
	Huge        int     // huge regions, retained ones included
	Retained    uintptr // bytes of retained free huge regions, those kept in P caches included
	Spare       uintptr // bytes of freed medium blocks' pages kept whole for reuse
	// FreeBlocks counts what the heap keeps for reuse with no block in it:
	// empty chunks, retained huge regions (in P caches too) and spare
	// medium spans (not the free slots of partly used spans, nor the slots
	// and medium spans per-P caches hold).
	FreeBlocks int
}

// Stats returns a snapshot of the heap's holdings.
// Chunks and regions on their way back to the source count until the
// source has them, and Stats waits for those in flight.
func (h *Heap) Stats() Stats {
	h.gate.Lock()
	defer h.gate.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	spans := 0
	for _, l := range h.spare {
		spans += len(l)
	}
	idle, nidle := h.idleHuge() // the central list's and every P cache's (hugecache.go)
	return Stats{Mapped: h.mapped, Chunks: len(h.chunks) + h.relChunks, EmptyChunks: h.empty + h.relChunks,
		Huge: h.nhuge + h.relHuge, Retained: idle, Spare: uintptr(h.spareN),
		FreeBlocks: h.empty + nidle + spans}
}
