package target

import (
	"errors"
	"sync/atomic"
)

// layer is Device as internal/device sees it: the public layer attached to
// a core device (device.Layer), so that the core asks its queues for the
// stream-ordered free and closes them with the device. A separate type, so
// that its methods are not Device's.
type layer Device

// AfterUse hands done to each of d's queues with a copy in flight that
// reads or writes [p, p+n) (device.FreeAfterUse, for alloc's Free of a
// pinned block); a queue whose work turns out done is released on the way.
func (l *layer) AfterUse(p, n uintptr, left *atomic.Int64, done func()) {
	d := (*Device)(l)
	for _, q := range d.openQueues() {
		q.mu.Lock()
		if (q.closed && !q.held) || !q.usesLocked(p, n) {
			q.mu.Unlock()
			continue
		}
		left.Add(1)
		q.appendLocked(pending{fn: done})
		_, _ = q.queryAndReleaseLocked() // done already: release now; an error keeps it held
	}
}

// SyncQueues waits for the work of every open queue of d and releases what
// it held, so that the frees waiting on queues are done before Shutdown
// looks for live pinned blocks. Errors are Close's to report.
func (l *layer) SyncQueues() {
	for _, q := range (*Device)(l).openQueues() {
		_ = q.synchronize()
	}
}

// Close destroys d's queues (waiting for their work) and frees every
// staging buffer, including those held by queues that never completed, and
// the device-memory pool; the core closes the Impl next, then runs after.
func (l *layer) Close() (after func(), err error) {
	d := (*Device)(l)
	d.qmu.Lock()
	queues := d.queues
	d.queues = nil
	d.qmu.Unlock()
	var errs []error
	for q := range queues {
		errs = append(errs, q.destroy())
	}
	d.pool.close()
	d.devpool.closePool(d.impl)
	// Queues closed after a failed wait held what their work used: once the
	// device is closed (its context released) that work can no longer run.
	return func() {
		for q := range queues {
			q.releaseHeld()
		}
	}, errors.Join(errs...)
}

// Public returns d as users see it (memprof reports its MemoryStats).
func (l *layer) Public() any { return (*Device)(l) }
