package amdgpu

import (
	"errors"
	"sync"
)

// queue is an in-order chain of completion signals: every copy depends on
// the previous copy's signal, so the last signal reaching 0 means all work
// is done.
//
// A signal is destroyed only once no copy can still read it: when its
// successor completed too, or when it is the last one and done (a later
// submission then has nothing to depend on). The runtime reads a dependency
// until the dependent copy starts, so destroying it earlier would be a use
// after free.
type queue struct {
	d *device

	mu      sync.Mutex
	closed  bool
	pending []entry
	err     error // a release that failed while submitting, reported by the next Synchronize or Query
}

type entry struct {
	sig  uint64
	refs loan // lock table references of this copy, dropped when it is done

	shared *sharedSig   // sig is an event's too (event.go): released, not destroyed
	holds  []*sharedSig // event signals this entry's copy depends on, kept until it is done
}

// reapAt bounds the signals a queue that is never synchronized or queried
// accumulates: beyond it, a submission releases the completed prefix.
const reapAt = 64

// submit chains one async copy per span and owns refs: they are dropped once
// the last span's copy completed, or at once when none was submitted.
func (q *queue) submit(spans []span, refs loan) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	fn := q.d.fn
	if q.closed {
		return errors.Join(ErrClosed, q.d.tab.Return(refs))
	}
	for i, s := range spans {
		sig, err := fn.newSignal()
		if err == nil {
			var dep uint64
			if len(q.pending) > 0 {
				dep = q.pending[len(q.pending)-1].sig
			}
			da, sa := s.dstAgent, s.srcAgent
			if da == 0 {
				da, sa = q.d.agent, q.d.agent
			}
			if err = fn.asyncCopy(s.dst, da, s.src, sa, s.n, dep, sig); err != nil {
				err = errors.Join(err, fn.destroySignal(sig))
			}
		}
		if err != nil {
			if i == 0 {
				return errors.Join(err, q.d.tab.Return(refs))
			}
			// The earlier pieces are in flight and read what refs hold.
			last := &q.pending[len(q.pending)-1]
			last.refs = last.refs.Join(refs)
			return err
		}
		e := entry{sig: sig}
		if i == len(spans)-1 {
			e.refs = refs
		}
		q.pending = append(q.pending, e)
	}
	if len(q.pending) >= reapAt {
		// The copy is submitted and owns its references now: a failure to
		// release older entries is not this submission's.
		q.err = errors.Join(q.err, q.reapLocked())
	}
	return nil
}

// takeErrLocked returns and clears the deferred release error.
func (q *queue) takeErrLocked() error {
	err := q.err
	q.err = nil
	return err
}

// Synchronize waits for the last copy, hence for all of them.
func (q *queue) Synchronize() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return q.takeErrLocked()
	}
	q.d.fn.waitZero(q.pending[len(q.pending)-1].sig)
	return errors.Join(q.takeErrLocked(), q.releaseLocked(len(q.pending)))
}

// Query reports whether the last copy, hence every copy, completed.
func (q *queue) Query() (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return true, q.takeErrLocked()
	}
	if !q.d.fn.done(q.pending[len(q.pending)-1].sig) {
		return false, q.takeErrLocked()
	}
	return true, errors.Join(q.takeErrLocked(), q.releaseLocked(len(q.pending)))
}

// Destroy waits for the queue's work and releases its signals.
func (q *queue) Destroy() error {
	err := q.Synchronize()
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.d.mu.Lock()
	delete(q.d.queues, q)
	q.d.mu.Unlock()
	return err
}

// reapLocked releases the completed prefix but its last entry when a later
// entry still depends on it.
func (q *queue) reapLocked() error {
	k := 0
	for k < len(q.pending) && q.d.fn.done(q.pending[k].sig) {
		k++
	}
	if k < len(q.pending) && k > 0 {
		k-- // the successor of pending[k-1] may still read it
	}
	return q.releaseLocked(k)
}

// releaseLocked destroys the first k entries' signals, all of them done,
// and drops their transfer locks.
func (q *queue) releaseLocked(k int) error {
	var errs []error
	for _, e := range q.pending[:k] {
		if e.shared != nil {
			errs = append(errs, e.shared.release(q.d.fn))
		} else {
			errs = append(errs, q.d.fn.destroySignal(e.sig))
		}
		for _, h := range e.holds {
			errs = append(errs, h.release(q.d.fn))
		}
		errs = append(errs, q.d.tab.Return(e.refs))
	}
	q.pending = append(q.pending[:0], q.pending[k:]...)
	return errors.Join(errs...)
}
