package heap

// Giving memory back to the source outside the heap's lock.
//
// A pinned heap's source unlocks before it unmaps (cuMemHostUnregister,
// hsa_amd_memory_unlock), and those calls synchronize with the device:
// milliseconds, or as long as the copies in flight take. Under h.mu they
// would stall every allocation that needs the central lists, including one
// a cached block could serve. So a chunk or region let go under h.mu is
// only taken out of the heap there (out of the chunk list and the radix
// table: nothing can reach it any more) and queued in h.doomed; h.unlock
// hands the queue to the source after the lock is dropped. Until the source
// has it, the chunk is still counted in Stats (Mapped, Chunks, Huge): it is
// still mapped and locked, and Stats waits (h.gate) for releases in flight,
// so that what it says agrees with the device's registry.

// doomedRange is a chunk or huge region on its way back to the source.
type doomedRange struct {
	base, size uintptr
	mapped     uintptr // what it counts in h.mapped
	huge       bool
}

// unlock drops h.mu, then gives what was let go under it to the source.
func (h *Heap) unlock() {
	d := h.doomed
	h.doomed = nil
	h.mu.Unlock()
	if d != nil {
		h.giveBack(d)
	}
}

// giveBack returns ranges to the source (h.mu not held), then uncounts them.
func (h *Heap) giveBack(d []doomedRange) {
	h.gate.RLock()
	defer h.gate.RUnlock()
	for _, r := range d {
		_ = h.src.Release(r.base, r.size) // the table no longer points here: nothing can reach it
	}
	h.mu.Lock()
	for _, r := range d {
		h.mapped -= r.mapped
		if r.huge {
			h.relHuge--
		} else {
			h.relChunks--
		}
	}
	h.mu.Unlock()
}

// doom queues [base, base+size) for the source. h.mu held.
func (h *Heap) doom(r doomedRange) {
	h.doomed = append(h.doomed, r)
	if r.huge {
		h.relHuge++
	} else {
		h.relChunks++
	}
}
