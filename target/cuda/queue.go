package cuda

import (
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

	evMu   sync.Mutex // guards poolEv
	poolEv uintptr    // CUevent nil-queue pool frees wait for (mempool.go), 0 until needed
}

func (q *Queue) handle() uintptr { return uintptr(q.stream.Load()) }

func (q *Queue) live(what string) (uintptr, error) {
	s := q.handle()
	if s == 0 {
		return 0, fmt.Errorf("%v: %s on a destroyed queue: %w", q.d, what, ErrClosed)
	}
	return s, nil
}

// Synchronize waits until every copy enqueued so far has completed.
func (q *Queue) Synchronize() error {
	s, err := q.live("synchronize")
	if err != nil {
		return err
	}
	return q.d.withCtx("cuStreamSynchronize", func() result { return call(q.d.drv.cuStreamSynchronize, s) })
}

// Query reports whether every copy enqueued so far has completed
// (cuStreamQuery: CUDA_ERROR_NOT_READY is "not yet", not an error).
func (q *Queue) Query() (bool, error) {
	s, err := q.live("query")
	if err != nil {
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
func (q *Queue) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.handle()
	if s == 0 {
		return nil
	}
	if err := q.Synchronize(); err != nil {
		return err
	}
	q.evMu.Lock()
	q.stream.Store(0)
	ev := q.poolEv
	q.poolEv = 0
	q.evMu.Unlock()
	if ev != 0 {
		// Waits already issued on it stay valid (cuEventDestroy returns at
		// once and releases the event once the device completed it).
		_ = q.d.withCtx("cuEventDestroy", func() result { return call(q.d.drv.cuEventDestroy, ev) })
	}
	return q.d.withCtx("cuStreamDestroy", func() result { return call(q.d.drv.cuStreamDestroy, s) })
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
		return call(drv.cuEventCreate, uintptr(unsafe.Pointer(&ev)), cuEventDisableTiming)
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
