package target

// The device pool over the driver's stream-ordered allocator
// (plugin.MemPool): the ordering rule of devpool.go, kept by the driver.
//
//   - PoolAlloc(n, q) allocates in q's order (cuMemAllocFromPoolAsync on q's
//     stream); PoolFree(p, q) frees in q's order (cuMemFreeAsync on q's
//     stream): the driver reuses the block for q's later work at once and
//     for another stream only once q's work before the free completed.
//   - A block other queues recorded (their copies, Queue.RecordUse) is freed
//     after their work too: on the one busy queue's stream, or after an
//     event of each (cuStreamWaitEvent) on a free stream of the plugin's.
//   - Without a queue, PoolAlloc returns memory usable by anything at once
//     (the plugin synchronizes its allocation stream; the pool does not let
//     the driver make that stream wait for another stream's free), and
//     PoolFree frees once the work issued so far on every open queue of the
//     device has completed: on the stream of the one busy queue, or on a
//     free stream after an event recorded on each busy queue; the host
//     waits for nothing.
//   - The limit bounds the bytes handed out (the driver reserves in its own
//     granularity) and is the pool's release threshold: free memory above
//     it goes back to the device at the next synchronization.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

func (d *Device) driverPoolAlloc(drv plugin.MemPool, n uintptr, q *Queue) (uintptr, error) {
	pl := d.devpool
	pl.mu.Lock()
	if pl.limit != 0 && pl.drvInUse+n > pl.limit {
		inUse, limit := pl.drvInUse, pl.limit
		pl.mu.Unlock()
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w: %d of %d bytes handed out",
			d.ID, n, ErrPoolLimit, inUse, limit)
	}
	pl.drvInUse += n // counted before the driver call, so that racing allocations respect the limit
	pl.mu.Unlock()

	p, err := d.driverPoolAllocOnce(drv, n, q)
	if errors.Is(err, ErrOutOfMemory) {
		// Out of memory: give back what the pools cache and retry once
		// (outside q's issue: the release may wait on q's lock).
		d.releaseForRetry()
		p, err = d.driverPoolAllocOnce(drv, n, q)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if err != nil {
		pl.drvInUse -= n
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w", d.ID, n, plugin.Cause(err))
	}
	pl.addLiveLocked(p, &liveBlock{size: n, drv: true})
	pl.st.Allocs++
	pl.syncDriverLocked(drv) // the driver may have reserved more
	return p, nil
}

func (d *Device) driverPoolAllocOnce(drv plugin.MemPool, n uintptr, q *Queue) (p uintptr, err error) {
	if q == nil {
		return drv.Alloc(n, nil)
	}
	err = q.issue(func(qi plugin.QueueImpl) error {
		var e error
		p, e = drv.Alloc(n, qi)
		return e
	}, pending{})
	return p, err
}

// driverPoolFree frees p (b, already out of the books) in q's order when no
// other queue recorded work on it; after the work of q and the queues in
// same when some did; after the work of every open queue without q (or
// when q was closed meanwhile: it has no work left). Queues of other
// devices that recorded it (peer copies) are waited for on the host first:
// the free is issued once their work is done.
func (d *Device) driverPoolFree(drv plugin.MemPool, p uintptr, b *liveBlock, q *Queue, same, foreign []*Queue) error {
	if len(foreign) > 0 {
		afterAll(foreign, func() {
			if err := d.freeAfterQueues(drv, p, d.openQueues()); err != nil {
				d.devpool.keepLive(p, b)
				d.devpool.freeErrs.Add(1)
			}
		})
		return nil
	}
	err := ErrQueueClosed
	switch {
	case q != nil && len(same) == 0:
		err = q.issue(func(qi plugin.QueueImpl) error { return drv.Free(p, qi, nil) }, pending{})
	case q != nil:
		err = d.freeAfterQueues(drv, p, append(same, q))
	}
	if errors.Is(err, ErrQueueClosed) {
		err = d.freeAfterQueues(drv, p, d.openQueues())
	}
	if err != nil {
		// The driver still holds the block: keep it in the books, so that
		// a later free (or Close) can release it.
		d.devpool.keepLive(p, b)
		return fmt.Errorf("device %d: pool free of %#x: %w", d.ID, p, plugin.Cause(err))
	}
	return nil
}

// keepLive puts a driver-pool block whose free failed back in the books.
func (pl *devPool) keepLive(p uintptr, b *liveBlock) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.addLiveLocked(p, b)
	pl.drvInUse += b.size
}

// freeAfterQueues frees p once the work issued so far on every queue of qs
// (queues of d) has completed. A queue whose work is known done (a
// Synchronize or Query found it so, and nothing was issued since) costs no
// driver call. With one queue left the free goes on that queue's stream
// (no event, no stream shared with other frees: its later allocations may
// reuse the block at once, which is right, no other queue has work on it);
// with several the plugin frees after an event of each. Each queue is held
// open (its life lock, shared) while the driver records on it, so none is
// destroyed under the call.
func (d *Device) freeAfterQueues(drv plugin.MemPool, p uintptr, qs []*Queue) error {
	// In creation order: two frees holding some life locks while they wait
	// for another, behind a Close waiting to take it exclusively, would
	// deadlock if they took them in different orders.
	qs = slices.Clone(qs)
	slices.SortFunc(qs, func(a, b *Queue) int { return cmp.Compare(a.id, b.id) })
	qs = slices.Compact(qs)
	impls := make([]plugin.QueueImpl, 0, len(qs))
	for _, o := range qs {
		if o.idle() {
			continue // its work is done: nothing to wait for
		}
		o.life.RLock()
		o.mu.Lock()
		closed := o.closed
		o.mu.Unlock()
		if closed {
			o.life.RUnlock()
			continue
		}
		defer o.life.RUnlock()
		impls = append(impls, o.impl)
	}
	if len(impls) == 1 {
		return drv.Free(p, impls[0], nil)
	}
	return drv.Free(p, nil, impls)
}

// driverPoolTrim trims the driver's pool to keep bytes and returns the
// bytes it gave back (reserved before less reserved after).
func (pl *devPool) driverPoolTrim(drv plugin.MemPool, keep uintptr) uintptr {
	before, _, err := drv.Stats()
	if err != nil {
		return 0
	}
	if pl.trimDriver(drv, keep) != nil {
		return 0
	}
	after, _, err := drv.Stats()
	if err != nil || after >= before {
		return 0
	}
	return uintptr(before - after)
}
