package target

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Queue is an in-order queue of asynchronous transfers on one device (a CUDA
// stream, an HSA signal chain; on the host, work done at once).
//
// It holds what its in-flight copies still read: staging buffers, and host
// buffers locked for the duration of a transfer. They are released when
// Synchronize returns, and when Query reports all work done, so a queue that
// is only ever queried still recycles. Query and release happen under the
// queue's lock, and a submission hands its buffer over only after the copy
// that reads it was issued: a Query racing with a submission either sees
// that copy or not yet the buffer, never the buffer without the copy.
type Queue struct {
	dev  *Device
	impl plugin.QueueImpl
	id   uint64 // creation order: several queues' life locks are taken in it

	// life is held shared while work is issued on impl and exclusively to
	// destroy it, so no copy is issued on a destroyed vendor queue.
	life sync.RWMutex

	mu      sync.Mutex
	pending []pending // in the order handed over
	seq     uint64    // the seq of the next pending entry
	closed  bool
	// held: closed after a failed synchronize, with pending entries the
	// vendor queue's work may still use. The queue stays in its device's
	// set until a Close, Query through device.FreeAfterUse, or Shutdown finds the
	// work done (or the device closed): until then nothing it holds is
	// released, and a free of memory its copies use waits for it.
	held    bool
	heldErr error // the failed synchronize

	// issued counts the work issued on impl; done is issued as it was
	// before the latest Synchronize or Query that found the work done. A
	// free without a queue waits only for the queues not known idle
	// (idle), sparing the driver calls of the others.
	issued, done atomic.Uint64
}

// idle reports whether all work issued on q is known to have completed.
func (q *Queue) idle() bool { return q.done.Load() == q.issued.Load() }

// markDone records that the work counted in n has completed.
func (q *Queue) markDone(n uint64) {
	for {
		d := q.done.Load()
		if d >= n || q.done.CompareAndSwap(d, n) {
			return
		}
	}
}

// pending is something released once the copies issued before it finish.
// It is the one mechanism of stream-ordered release: staging buffers,
// transfer locks, the host ranges of pinned copies in flight (which a free
// waits for) and the functions OnDone runs all wait in it.
type pending struct {
	seq    uint64
	buf    stagingBuf // a staging buffer to recycle, if buf.p != 0
	unlock uintptr    // a host buffer to UnlockUnmapped, if != 0
	use    hostRange  // host memory a copy in flight reads or writes, if use.n != 0
	fn     func()     // run once the work before it completed, if not nil
}

func (p pending) holds() bool { return p.buf.p != 0 || p.unlock != 0 || p.use.n != 0 || p.fn != nil }

// hostRange is [p, p+n) of host memory.
type hostRange struct{ p, n uintptr }

func (r hostRange) overlaps(p, n uintptr) bool { return r.n != 0 && p < r.p+r.n && r.p < p+n }

// queueIDs numbers the queues in creation order.
var queueIDs atomic.Uint64

// NewQueue creates a queue on d.
func (d *Device) NewQueue() (*Queue, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	qi, err := d.impl.NewQueue()
	if err != nil {
		return nil, fmt.Errorf("device %d: new queue: %w", d.ID, plugin.Cause(err))
	}
	q := &Queue{dev: d, impl: qi, id: queueIDs.Add(1)}
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if d.queues == nil {
		_ = qi.Destroy()
		return nil, fmt.Errorf("device %d: %w", d.ID, ErrShutdown)
	}
	d.queues[q] = struct{}{}
	return q, nil
}

// Device returns the device the queue belongs to.
func (q *Queue) Device() *Device { return q.dev }

// issue runs fn, which enqueues work on the vendor queue, unless the queue
// is closed; then hands over what that work reads (p, if not zero).
func (q *Queue) issue(fn func(plugin.QueueImpl) error, p pending) error {
	q.life.RLock()
	defer q.life.RUnlock()
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrQueueClosed
	}
	if err := fn(q.impl); err != nil {
		return err
	}
	q.issued.Add(1)
	if p.holds() {
		q.mu.Lock()
		q.appendLocked(p)
		q.mu.Unlock()
	}
	return nil
}

func (q *Queue) appendLocked(p pending) {
	p.seq = q.seq
	q.seq++
	q.pending = append(q.pending, p)
	if p.use.n != 0 {
		device.HostUseAdded() // counted before FreeAfterUse can see it
	}
}

// synchronize waits in the driver for all work submitted so far and
// releases what the queue held.
func (q *Queue) synchronize() error {
	q.life.RLock()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.life.RUnlock()
		return fmt.Errorf("synchronize: %w", ErrQueueClosed)
	}
	// Everything pending now belongs to copies issued before the wait starts.
	limit := q.seq
	q.mu.Unlock()
	issued := q.issued.Load()
	err := q.impl.Synchronize()
	q.life.RUnlock()
	if err != nil {
		return fmt.Errorf("device %d: synchronize: %w", q.dev.ID, err)
	}
	q.markDone(issued)
	q.mu.Lock()
	done := q.takeLocked(limit)
	q.mu.Unlock()
	q.dev.release(done)
	return nil
}

// Query reports whether all work submitted so far has completed; if so it
// releases what the queue held.
func (q *Queue) Query() (bool, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false, fmt.Errorf("query: %w", ErrQueueClosed)
	}
	ok, err := q.queryAndReleaseLocked()
	if err != nil {
		return false, fmt.Errorf("device %d: query: %w", q.dev.ID, err)
	}
	return ok, nil
}

// queryAndReleaseLocked asks the driver whether the queue's work is done
// and, if so, releases what it holds. The query and the taking happen under
// q.mu (held on entry, released on return), so a submission cannot slip a
// buffer in between; the release itself runs after unlocking.
func (q *Queue) queryAndReleaseLocked() (bool, error) {
	issued := q.issued.Load()
	ok, err := q.impl.Query()
	var done []pending
	forget := false
	if err == nil && ok {
		q.markDone(issued)
		done = q.takeLocked(q.seq)
		forget, q.held = q.held, false
	}
	q.mu.Unlock()
	q.dev.release(done)
	if forget {
		q.dev.forgetQueue(q)
	}
	return ok, err
}

// forgetQueue drops q from d's open queues.
func (d *Device) forgetQueue(q *Queue) {
	d.qmu.Lock()
	delete(d.queues, q)
	d.qmu.Unlock()
}

// recycleIfDone releases what the queue holds when its work is done; a
// submission calls it before allocating a new staging buffer.
func (q *Queue) recycleIfDone() {
	q.mu.Lock()
	if q.closed || len(q.pending) == 0 {
		q.mu.Unlock()
		return
	}
	_, _ = q.queryAndReleaseLocked() // an error leaves the buffers held, to be retried
}

// takeLocked removes the pending entries handed over before seq limit and
// returns them.
func (q *Queue) takeLocked(limit uint64) []pending {
	k := 0
	for k < len(q.pending) && q.pending[k].seq < limit {
		k++
	}
	if k == 0 {
		return nil
	}
	done := append([]pending(nil), q.pending[:k]...)
	n := copy(q.pending, q.pending[k:])
	clear(q.pending[n:])
	q.pending = q.pending[:n]
	return done
}

// Close waits for the queue's work, releases what it held and destroys it.
//
// When the wait fails, the work is not known to be done: the driver may
// still run it (cuStreamSynchronize "may also return error codes from
// previous, asynchronous launches"). Close then destroys the vendor queue
// all the same (cuStreamDestroy returns at once and releases the stream
// once its work completed) but keeps what that work uses — staging
// buffers, transfer locks, the host ranges of pinned copies (a free of
// them waits) and the functions OnDone deferred — and returns the wait's
// error with ErrWorkPending. A later Close waits again and releases them
// once the work is known done (nil then); Shutdown releases them once the
// device is closed. Closing a queue that holds nothing is a no-op.
func (q *Queue) Close() error {
	err := q.destroy()
	q.mu.Lock()
	held := q.held
	q.mu.Unlock()
	if !held {
		q.dev.forgetQueue(q)
	}
	return err
}

// destroy waits for the queue's work, destroys the vendor queue and
// releases everything pending when the wait succeeded; otherwise it keeps
// the pending entries (held). On a held queue it waits again.
func (q *Queue) destroy() error {
	q.mu.Lock()
	if q.closed {
		held := q.held
		q.mu.Unlock()
		if !held {
			return nil
		}
		return q.waitHeld()
	}
	q.closed = true
	q.mu.Unlock()

	q.life.Lock() // no issue, no wait in progress
	issued := q.issued.Load()
	syncErr := q.impl.Synchronize()
	err := q.impl.Destroy() // destroys it also when its own wait fails
	q.life.Unlock()
	if err != nil {
		err = fmt.Errorf("device %d: destroy queue: %w", q.dev.ID, err)
	}
	if syncErr != nil {
		syncErr = fmt.Errorf("device %d: close queue: synchronize: %w", q.dev.ID, syncErr)
		q.mu.Lock()
		n := len(q.pending)
		if n > 0 {
			q.held, q.heldErr = true, syncErr
		}
		q.mu.Unlock()
		if n > 0 {
			return errors.Join(q.heldError(n, syncErr), err)
		}
		return errors.Join(syncErr, err)
	}
	q.markDone(issued)
	q.mu.Lock()
	done := q.takeLocked(q.seq)
	q.mu.Unlock()
	q.dev.release(done)
	return err
}

// heldError says what a queue closed after a failed wait keeps, and why.
func (q *Queue) heldError(n int, cause error) error {
	return fmt.Errorf("%w: %w; %d staging buffers, transfer locks, host ranges in use or deferred frees are kept until a Close finds the work done, or Shutdown",
		cause, ErrWorkPending, n)
}

// waitHeld waits again for the work of a queue closed after a failed wait
// (the vendor queue answers for its work after Destroy) and releases what
// it held once that work is known done.
func (q *Queue) waitHeld() error {
	issued := q.issued.Load()
	if err := q.impl.Synchronize(); err != nil {
		q.mu.Lock()
		n := len(q.pending)
		still := q.held && n > 0
		q.mu.Unlock()
		if !still {
			return nil // released meanwhile
		}
		return q.heldError(n, fmt.Errorf("device %d: close queue: synchronize: %w", q.dev.ID, err))
	}
	q.markDone(issued)
	q.mu.Lock()
	done := q.takeLocked(q.seq)
	q.held = false
	q.mu.Unlock()
	q.dev.release(done)
	return nil
}

// releaseHeld releases what a queue closed after a failed wait still holds,
// once its device is closed (its work can no longer run).
func (q *Queue) releaseHeld() {
	q.mu.Lock()
	if !q.held {
		q.mu.Unlock()
		return
	}
	done := q.takeLocked(q.seq)
	q.held = false
	q.mu.Unlock()
	q.dev.release(done)
}

// release returns staging buffers to the pool, unlocks host buffers locked
// for transfers, forgets the host ranges of completed copies and runs what
// OnDone deferred, in the order they were handed over.
func (d *Device) release(done []pending) {
	for _, p := range done {
		if p.buf.p != 0 {
			d.pool.put(p.buf, true)
		}
		if p.unlock != 0 {
			_ = d.reg.UnlockUnmapped(p.unlock, d.mapMode)
		}
		if p.use.n != 0 {
			device.HostUseDone()
		}
		if p.fn != nil {
			device.Run(p.fn) // held back while Shutdown holds its locks
		}
	}
}

// OnDone runs fn once all work issued on q so far has completed: the
// moment of CUDA's cuLaunchHostFunc, which stream-ordered releases need
// (cuMemFreeAsync, PyTorch's record_stream). It runs at the Synchronize,
// Query or Close that finds that work done, or before OnDone returns when
// it already is; never from a driver thread. alloc.FreeAfter frees a block
// this way, and Array.FreeOn an array.
//
// An error (a nil function, a closed queue) means fn was not taken and
// will never run. Once taken, fn is the queue's: OnDone then returns nil
// even when the driver fails the query that would have run it at once
// (the error comes back from the next Synchronize), since a caller told
// "error" would free the block itself and the queue would free it again.
func (q *Queue) OnDone(free func()) error {
	if free == nil {
		return fmt.Errorf("on done: a nil function: %w", ErrInvalidArgument)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("on done: %w", ErrQueueClosed)
	}
	q.appendLocked(pending{fn: free})
	// Often the work is done already: then free now, one driver query. A
	// failed query leaves free queued, to run at the Synchronize, Query or
	// Close that finds the work done (Close runs it whatever the driver says).
	_, _ = q.queryAndReleaseLocked()
	return nil
}

// usesLocked reports whether a pending copy of q reads or writes [p, p+n).
func (q *Queue) usesLocked(p, n uintptr) bool {
	for _, e := range q.pending {
		if e.use.overlaps(p, n) {
			return true
		}
	}
	return false
}

// ErrQueueClosed: an operation on a queue after Close.
var ErrQueueClosed = errors.New("queue closed")

// ErrWorkPending: Close could not learn that the queue's work is done (its
// synchronize failed); what the work uses is kept until a later Close finds
// it done, or Shutdown.
var ErrWorkPending = errors.New("queue work not known done")
