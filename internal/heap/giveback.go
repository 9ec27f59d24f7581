package heap

import "github.com/ompalloc/ompalloc/internal/pcpu"

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

// A chunk also waits for a grace period before it goes back. A stale
// pointer's Free (a double free racing the chunk's release) may have found
// the chunk in the table just before it was taken out and be about to read
// or swap a block header in it; that happens pinned (see Free), and a
// goroutine cannot stay pinned across a stop-the-world. So a chunk goes
// back to the source only after a stop-the-world that began after it left
// the table: pcpu.Quiesce, run by whoever let the chunk go, after h.mu is
// dropped and before the source has it (tens of µs, no collection). The
// release is done when the call that let the chunk go returns (a Free, a
// Trim): VmLck and Stats drop together. (Until issue 23 a chunk let go
// outside Trim waited for the next garbage collection, seen by a cleanup:
// a program that made no garbage kept it mapped, locked and counted.)
// Huge regions hold no headers (their state lives in their span, Go
// memory) and go back without one.

// unlock drops h.mu, then gives what was let go under it to the source
// (chunks after a grace period, see above). The caller is not pinned.
func (h *Heap) unlock() {
	d := h.doomed
	h.doomed = nil
	h.mu.Unlock()
	if d == nil {
		return
	}
	for _, r := range d {
		if !r.huge {
			pcpu.Quiesce() // the grace period (see above)
			break
		}
	}
	h.giveBack(d)
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
