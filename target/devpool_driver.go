package target

// The device pool over the driver's stream-ordered allocator
// (plugin.MemPool): the ordering rule of devpool.go, kept by the driver.
//
//   - PoolAlloc(n, q) allocates in q's order (cuMemAllocFromPoolAsync on q's
//     stream); PoolFree(p, q) frees in q's order (cuMemFreeAsync on q's
//     stream): the driver reuses the block for q's later work at once and
//     for another stream only once q's work before the free completed.
//   - Without a queue, PoolAlloc returns memory usable by anything at once
//     (the plugin synchronizes its allocation stream), and PoolFree frees
//     once the work issued so far on every open queue of the device has
//     completed: the plugin makes its free stream wait for an event
//     recorded on each (cuStreamWaitEvent) before cuMemFreeAsync; the host
//     waits for nothing.
//   - The limit bounds the bytes handed out (the driver reserves in its own
//     granularity) and is the pool's release threshold: free memory above
//     it goes back to the device at the next synchronization.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/ompalloc/ompalloc/target/plugin"
)

func (d *Device) driverPoolAlloc(drv plugin.MemPool, n uintptr, q *Queue) (uintptr, error) {
	pl := d.devpool
	pl.mu.Lock()
	if pl.limit != 0 && pl.st.InUse+n > pl.limit {
		inUse := pl.st.InUse
		pl.mu.Unlock()
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w: %d of %d bytes handed out",
			d.ID, n, ErrPoolLimit, inUse, pl.limit)
	}
	pl.st.InUse += n // counted before the driver call, so that racing allocations respect the limit
	pl.mu.Unlock()

	var p uintptr
	var err error
	if q == nil {
		p, err = drv.Alloc(n, nil)
	} else {
		err = q.issue(func(qi plugin.QueueImpl) error {
			var e error
			p, e = drv.Alloc(n, qi)
			return e
		}, pending{})
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if err != nil {
		pl.st.InUse -= n
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w", d.ID, n, err)
	}
	pl.live[p] = n
	pl.st.Allocs++
	return p, nil
}

// driverPoolFree frees p (n bytes, already out of the books) in q's order,
// or after the work of every open queue. A queue closed meanwhile has no
// work left: the free then waits for the others.
func (d *Device) driverPoolFree(drv plugin.MemPool, p, n uintptr, q *Queue) error {
	err := ErrQueueClosed
	if q != nil {
		err = q.issue(func(qi plugin.QueueImpl) error { return drv.Free(p, qi, nil) }, pending{})
	}
	if errors.Is(err, ErrQueueClosed) {
		err = d.freeAfterOpenQueues(drv, p)
	}
	if err != nil {
		// The driver still holds the block: keep it in the books, so that
		// a later free (or Close) can release it.
		pl := d.devpool
		pl.mu.Lock()
		pl.live[p] = n
		pl.st.InUse += n
		pl.mu.Unlock()
		return fmt.Errorf("device %d: pool free of %#x: %w", d.ID, p, err)
	}
	return nil
}

// freeAfterOpenQueues frees p once the work issued so far on every open
// queue has completed. A queue whose work is known done (a Synchronize or
// Query found it so, and nothing was issued since) costs no driver call.
// Each other queue is held open (its life lock, shared) while the driver
// records on it, so none is destroyed under the call.
func (d *Device) freeAfterOpenQueues(drv plugin.MemPool, p uintptr) error {
	d.qmu.Lock()
	qs := make([]*Queue, 0, len(d.queues))
	for o := range d.queues {
		qs = append(qs, o)
	}
	d.qmu.Unlock()
	// In creation order: two frees holding some life locks while they wait
	// for another, behind a Close waiting to take it exclusively, would
	// deadlock if they took them in different orders.
	slices.SortFunc(qs, func(a, b *Queue) int { return cmp.Compare(a.id, b.id) })
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
	return drv.Free(p, nil, impls)
}

// driverPoolTrim trims the driver's pool to keep bytes and returns the
// bytes it gave back (reserved before less reserved after).
func driverPoolTrim(drv plugin.MemPool, keep uintptr) uintptr {
	before, _, err := drv.Stats()
	if err != nil {
		return 0
	}
	if drv.Trim(keep) != nil {
		return 0
	}
	after, _, err := drv.Stats()
	if err != nil || after >= before {
		return 0
	}
	return uintptr(before - after)
}
