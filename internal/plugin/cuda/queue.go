package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Queue is a CUDA stream of one device: an in-order queue of asynchronous
// copies. It implements plugin.QueueImpl and records events.
type Queue struct {
	d      *device
	mu     sync.Mutex    // serialises Destroy with itself
	stream atomic.Uint64 // CUstream; 0 once destroyed

	evMu   sync.Mutex // guards poolEv, tail and tailErr
	poolEv uintptr    // CUevent nil-queue pool frees wait for (mempool.go), 0 until needed

	// tail follows the work of a stream destroyed after a failed wait
	// (Destroy): Query and Synchronize answer for that work through it
	// until they find it done. tailErr says why there is none when the
	// event could not be recorded (a context the error left unusable).
	tail      *Event
	tailErr   error
	afterFail bool // Destroy's wait failed: Query and Synchronize answer through tail
}

func (q *Queue) handle() uintptr { return uintptr(q.stream.Load()) }

func (q *Queue) live(what string) (uintptr, error) {
	s := q.handle()
	if s == 0 {
		return 0, fmt.Errorf("%v: %s on a destroyed queue: %w", q.d, what, ErrClosed)
	}
	return s, nil
}

// Synchronize waits until every copy enqueued so far has completed. After
// a Destroy whose wait failed it waits for the destroyed stream's work.
func (q *Queue) Synchronize() error {
	s, err := q.live("synchronize")
	if err != nil {
		if t, terr, ok := q.destroyedTail(); ok {
			return q.tailDone(t, terr, func(t *Event) (bool, error) { return true, t.Synchronize() })
		}
		return err
	}
	return q.d.withCtx("cuStreamSynchronize", func() result { return call(q.d.drv.cuStreamSynchronize, s) })
}

// Query reports whether every copy enqueued so far has completed
// (cuStreamQuery: CUDA_ERROR_NOT_READY is "not yet", not an error). After
// a Destroy whose wait failed it answers for the destroyed stream's work.
func (q *Queue) Query() (bool, error) {
	s, err := q.live("query")
	if err != nil {
		if t, terr, ok := q.destroyedTail(); ok {
			err := q.tailDone(t, terr, (*Event).Query)
			if errors.Is(err, ErrWorkPending) && t != nil {
				return false, nil // not yet
			}
			return err == nil, err
		}
		return false, err
	}
	var r result
	err = q.d.withCtx("cuStreamQuery", func() result {
		r = call(q.d.drv.cuStreamQuery, s)
		if r == cudaErrorNotReady {
			return cudaSuccess
		}
		return r
	})
	return err == nil && r == cudaSuccess, err
}

// Destroy waits for the queue's work and destroys the stream. A second
// Destroy does nothing.
//
// A failed wait does not keep the stream: cuStreamSynchronize "may also
// return error codes from previous, asynchronous launches", so the work may
// still run, and cuStreamDestroy "will return immediately and the resources
// associated with hStream will be released automatically once the device
// has completed all work in hStream" (CUDA Driver API, cuStreamSynchronize,
// cuStreamDestroy). Before destroying, an event is recorded after that work:
// Query and Synchronize then still say when it is done (ErrWorkPending
// until then), so the caller keeps what the work uses and no more. The
// wait's error is returned.
func (q *Queue) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.handle()
	if s == 0 {
		return nil
	}
	syncErr := q.Synchronize()
	var tail *Event
	var tailErr error
	if syncErr != nil {
		tail, tailErr = q.Record()
	}
	q.evMu.Lock()
	q.stream.Store(0)
	ev := q.poolEv
	q.poolEv = 0
	q.tail, q.tailErr, q.afterFail = tail, tailErr, syncErr != nil
	q.evMu.Unlock()
	if ev != 0 {
		// Waits already issued on it stay valid (cuEventDestroy returns at
		// once and releases the event once the device completed it).
		_ = q.d.withCtx("cuEventDestroy", func() result { return call(q.d.drv.cuEventDestroy, ev) })
	}
	err := q.d.withCtx("cuStreamDestroy", func() result { return call(q.d.drv.cuStreamDestroy, s) })
	return errors.Join(syncErr, err)
}

// destroyedTail reports whether the stream was destroyed after a failed
// wait and returns what follows its work: an event, or why there is none;
// neither once the work was found done.
func (q *Queue) destroyedTail() (*Event, error, bool) {
	q.evMu.Lock()
	defer q.evMu.Unlock()
	return q.tail, q.tailErr, q.handle() == 0 && q.afterFail
}

// tailDone asks check whether the destroyed stream's work is done: nil once
// it is (the event is then destroyed, and later asks say done at once),
// ErrWorkPending while it is not, the driver's error otherwise.
func (q *Queue) tailDone(t *Event, terr error, check func(*Event) (bool, error)) error {
	if t == nil {
		if terr == nil {
			return nil // found done before
		}
		return fmt.Errorf("%v: the work of a queue destroyed after a failed wait cannot be followed: %w: %w", q.d, ErrWorkPending, terr)
	}
	done, err := check(t)
	if err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("%v: a destroyed queue's work: %w", q.d, ErrWorkPending)
	}
	q.evMu.Lock()
	mine := q.tail == t
	if mine {
		q.tail = nil
	}
	q.evMu.Unlock()
	if mine {
		return t.Destroy()
	}
	return nil
}

// Record records an event after the work enqueued so far: the event
// completes when that work has.
func (q *Queue) Record() (*Event, error) {
	drv := q.d.drv
	if drv.cuEventCreate == 0 || drv.cuEventRecord == 0 || drv.cuEventQuery == 0 ||
		drv.cuEventSynchronize == 0 || drv.cuEventDestroy == 0 {
		return nil, fmt.Errorf("%v: events missing in %s: %w", q.d, drv.lib.Path, ErrNotSupported)
	}
	s, err := q.live("record")
	if err != nil {
		return nil, err
	}
	var ev uintptr
	if err := q.d.withCtx("cuEventCreate", func() result {
		return call(drv.cuEventCreate, uintptr(unsafe.Pointer(&ev)), q.d.eventFlags(false))
	}); err != nil {
		return nil, err
	}
	e := &Event{d: q.d, ev: ev}
	if err := q.d.withCtx("cuEventRecord", func() result { return call(drv.cuEventRecord, ev, s) }); err != nil {
		_ = e.Destroy()
		return nil, err
	}
	return e, nil
}

// Event marks a point in a queue's work.
type Event struct {
	d  *device
	ev uintptr
}

// Query reports whether the work before the event has completed.
func (e *Event) Query() (bool, error) {
	var r result
	err := e.d.withCtx("cuEventQuery", func() result {
		r = call(e.d.drv.cuEventQuery, e.ev)
		if r == cudaErrorNotReady {
			return cudaSuccess
		}
		return r
	})
	return err == nil && r == cudaSuccess, err
}

// Synchronize waits until the work before the event has completed.
func (e *Event) Synchronize() error {
	return e.d.withCtx("cuEventSynchronize", func() result { return call(e.d.drv.cuEventSynchronize, e.ev) })
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.d.withCtx("cuEventDestroy", func() result { return call(e.d.drv.cuEventDestroy, e.ev) })
}
