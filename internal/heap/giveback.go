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
// the table: pcpu.Quiesce, after h.mu is dropped and before the source has
// it (no collection). (Until issue 23 a chunk let go outside Trim waited
// for the next garbage collection, seen by a cleanup: a program that made
// no garbage kept it mapped, locked and counted.) Huge regions hold no
// headers (their state lives in their span, Go memory) and go back without
// one.
//
// The stop-the-world is not the caller's to wait for: it waits for every P
// to stop, 20-55 µs on an idle machine but 34-180 ms for a Free on a
// loaded 2-core one (issue 29: the OS had not scheduled the other
// threads). So a chunk's release runs on a goroutine of its own, started by
// the call that let it go (rare: only beyond the chunks a heap keeps), and
// that call returns at once. Until the release is done the chunk counts in
// Stats and its bytes stay locked; Stats, Trim and Close wait for releases
// in flight (h.gate: each holds a read lock from the moment it is queued),
// so what they say agrees with VmLck and the device's registry. Huge
// regions, which need no grace period, still go back before the call
// returns.

// unlock drops h.mu, then gives what was let go under it to the source:
// at once for huge regions alone, on a goroutine of its own (after a grace
// period, see above) when a chunk is among them. The caller is not pinned.
func (h *Heap) unlock() {
	d := h.doomed
	h.doomed = nil
	h.mu.Unlock()
	if d == nil {
		return
	}
	for _, r := range d {
		if !r.huge {
			h.gate.RLock() // released by the goroutine: Stats waits for it
			go h.giveBackLater(d)
			return
		}
	}
	h.gate.RLock()
	h.giveBack(d)
}

// giveBackLater waits for the grace period, then gives d back; the caller
// took a read lock of h.gate for it.
func (h *Heap) giveBackLater(d []doomedRange) {
	pcpu.Quiesce() // the grace period (see above)
	h.giveBack(d)
}

// WaitReleases waits until every chunk and region let go so far is back
// with the source (unlocked, unmapped and uncounted).
func (h *Heap) WaitReleases() {
	h.gate.Lock()
	h.gate.Unlock() // an empty critical section: the wait is the point
}

// giveBack returns ranges to the source (h.mu not held), then uncounts them,
// and drops the read lock of h.gate its caller took.
func (h *Heap) giveBack(d []doomedRange) {
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
