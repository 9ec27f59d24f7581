package target

// Events: points in a queue's work that other queues wait for without
// blocking the host, that the host queries or waits for (with a context),
// and that time the work between them.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Event marks a point in a queue's work (a CUDA event; an HSA signal). Record
// it on a queue, make other queues wait for it (Queue.WaitEvent), query it,
// wait for it (Synchronize, cancellable) and time between two (Elapsed).
//
// An Event is safe for concurrent use, and only a wait waits: Synchronize
// (and WaitEvent across plugins or on the host device) waits for the device
// without holding the event, so Query, Record, WaitEvent, Elapsed and Close
// called meanwhile from other goroutines return at once. The rules of such
// a race:
//   - a Record while a Synchronize waits moves the event: the wait ends at
//     the old point or at the new one, as if Synchronize had been called
//     just before or just after the Record (the driver decides which);
//   - Close while waits (or an Elapsed) are in flight returns at once: they
//     end normally, and the driver's event is destroyed when the last of
//     them returns, never under a wait (an error of that late destroy is
//     returned by that last call). After Close every method but Close
//     fails with ErrInvalidArgument.
type Event struct {
	dev    *Device
	impl   plugin.EventImpl
	timing bool

	// mu guards the fields below. It is held across the driver's
	// non-blocking calls (record, query, stream wait, destroy), which
	// keeps them in one order with the state here, and never across a
	// wait for the device. The states: open (closed false); closing
	// (closed, users > 0: the driver's event still lives for the calls in
	// flight, no new call starts); destroyed (closed, users 0: the
	// destroy ran, once, by Close or by the last call in flight).
	mu       sync.Mutex
	q        *Queue // where it was last recorded
	limit    uint64 // q's pending entries before it, released once it completed
	recorded bool
	gen      uint64 // Records that reached the driver: a wait that saw it change cannot tell which point it waited for
	closed   bool
	users    int // driver calls in flight without mu (waits, Elapsed)
}

// ErrNotReady: Elapsed of an event whose work has not completed yet
// (CUDA_ERROR_NOT_READY on CUDA). Wait for it (Synchronize) first.
var ErrNotReady = plugin.ErrNotReady

// NewEvent creates an event on d; timing events can be timed with Elapsed
// (and cost a little more to record on CUDA).
func (d *Device) NewEvent(timing bool) (*Event, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	ev, ok := d.impl.(plugin.Eventer)
	if !ok {
		return nil, fmt.Errorf("device %d: events: %w: the %s plugin has none", d.ID, errors.ErrUnsupported, d.plugin)
	}
	impl, err := ev.NewEvent(timing)
	if err != nil {
		return nil, fmt.Errorf("device %d: new event: %w", d.ID, err)
	}
	return &Event{dev: d, impl: impl, timing: timing}, nil
}

// Device returns the event's device.
func (e *Event) Device() *Device { return e.dev }

func (e *Event) live(what string) error {
	if e.closed {
		return fmt.Errorf("device %d: %s: %w: the event is closed", e.dev.ID, what, ErrInvalidArgument)
	}
	return nil
}

// enter starts a driver call that runs without e.mu (held by the caller):
// the driver's event stays until the matching leave.
func (e *Event) enter() { e.users++ }

// leave ends a call begun with enter; the last one after Close destroys
// the driver's event and returns the destroy's error.
func (e *Event) leave() error {
	e.mu.Lock()
	e.users--
	last := e.closed && e.users == 0
	e.mu.Unlock()
	if last {
		return e.destroy()
	}
	return nil
}

func (e *Event) destroy() error {
	if err := e.impl.Destroy(); err != nil {
		return fmt.Errorf("device %d: destroy an event: %w", e.dev.ID, err)
	}
	return nil
}

// Record captures the work issued on q so far (q must be a queue of the
// event's device): the event completes once that work has, never earlier.
// Recording again moves the event to the new point. It does not wait for
// the device, nor for a Synchronize of the event in progress.
func (e *Event) Record(q *Queue) error {
	if e == nil || e.impl == nil {
		return fmt.Errorf("record: a nil event: %w", ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live("record"); err != nil {
		return err
	}
	if q == nil || q.dev != e.dev {
		return fmt.Errorf("device %d: record an event: %w: the queue must be one of the event's device", e.dev.ID, ErrInvalidArgument)
	}
	var limit uint64
	err := q.issue(func(qi plugin.QueueImpl) error {
		q.mu.Lock()
		limit = q.seq
		q.mu.Unlock()
		e.gen++ // the driver may have moved the event, even if this fails
		return e.impl.Record(qi)
	}, pending{})
	if err != nil {
		return fmt.Errorf("device %d: record an event: %w", e.dev.ID, err)
	}
	e.q, e.limit, e.recorded = q, limit, true
	return nil
}

// WaitEvent makes the work issued on q from now on wait for the work e
// captured, without blocking the host (cuStreamWaitEvent; on HSA the next
// copy depends on the event's signal). e may belong to another device of
// the same plugin. Across plugins, or on the host device (whose queues do
// their work at once), the host waits for e before WaitEvent returns, as
// Synchronize does (without holding e). An event never recorded orders
// nothing.
func (q *Queue) WaitEvent(e *Event) error {
	if e == nil || e.impl == nil {
		return fmt.Errorf("wait for an event: a nil event: %w", ErrInvalidArgument)
	}
	if q == nil {
		return fmt.Errorf("wait for an event: a nil queue: %w", ErrInvalidArgument)
	}
	if q.dev.plugin != e.dev.plugin || q.dev.host {
		if err := e.wait("wait for an event"); err != nil {
			return fmt.Errorf("device %d: wait for an event of device %d: %w", q.dev.ID, e.dev.ID, err)
		}
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live("wait for an event"); err != nil {
		return err
	}
	if !e.recorded {
		return nil
	}
	if err := q.issue(func(qi plugin.QueueImpl) error { return e.impl.Wait(qi) }, pending{}); err != nil {
		return fmt.Errorf("device %d: wait for an event of device %d: %w", q.dev.ID, e.dev.ID, err)
	}
	return nil
}

// Query reports whether the work the event captured has completed (true
// for an event never recorded). It never blocks, not even while another
// goroutine waits in Synchronize.
func (e *Event) Query() (bool, error) {
	if e == nil || e.impl == nil {
		return false, fmt.Errorf("query an event: a nil event: %w", ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live("query an event"); err != nil {
		return false, err
	}
	if !e.recorded {
		return true, nil
	}
	ok, err := e.impl.Query()
	if err != nil {
		return false, fmt.Errorf("device %d: query an event: %w", e.dev.ID, err)
	}
	if ok {
		e.q.releaseBefore(e.limit)
	}
	return ok, nil
}

// Synchronize waits until the work the event captured has completed. A
// context that can be cancelled is polled (the driver's query, backing off
// from 20 µs to 2 ms): cancellation returns ctx.Err() and changes nothing.
// With context.Background it blocks in the driver (CUDA: on a
// CU_EVENT_BLOCKING_SYNC event unless OMPALLOC_CUDA_SCHED asks for spin or
// yield). Either way the event is not held while it waits (see Event).
func (e *Event) Synchronize(ctx context.Context) error {
	if e == nil || e.impl == nil {
		return fmt.Errorf("synchronize an event: a nil event: %w", ErrInvalidArgument)
	}
	if ctx == nil {
		return fmt.Errorf("synchronize an event: a nil context: %w", ErrInvalidArgument)
	}
	if ctx.Done() == nil {
		return e.wait("synchronize an event")
	}
	return poll(ctx, e.Query)
}

// wait blocks in the driver until the event's current point completed,
// without e.mu: the point, its queue and the Record count are taken under
// it, the driver's event is kept alive by enter/leave. The queue's entries
// before that point are released only if no Record reached the driver
// meanwhile (the driver may then have waited for the newer point only,
// on another queue).
func (e *Event) wait(what string) error {
	e.mu.Lock()
	if err := e.live(what); err != nil {
		e.mu.Unlock()
		return err
	}
	if !e.recorded {
		e.mu.Unlock()
		return nil
	}
	q, limit, gen := e.q, e.limit, e.gen
	e.enter()
	e.mu.Unlock()

	err := e.impl.Synchronize()

	e.mu.Lock()
	same := e.gen == gen
	e.mu.Unlock()
	if err == nil && same {
		q.releaseBefore(limit)
	}
	if err != nil {
		err = fmt.Errorf("device %d: %s: %w", e.dev.ID, what, err)
	}
	return errors.Join(err, e.leave())
}

// Elapsed is the time from start's completion to end's (CUDA:
// cuEventElapsedTime, about half a microsecond of resolution; HSA: the
// completion timestamps of the events' marker copies, from the runtime's
// async copy profiling, which a timing event turns on for the process):
// both recorded, complete, timing events of one device (CUDA:
// "cudaEventElapsedTime() will fail if the two input events are associated
// to different devices"; the clocks of two devices are not one clock). It
// is negative if end completed first. An event not complete yet is
// ErrNotReady (ask again later); an event never recorded, events of two
// devices or without timing are ErrInvalidArgument; a runtime that cannot time (an HSA
// runtime without hsa_amd_profiling_get_async_copy_time) is
// errors.ErrUnsupported.
func Elapsed(start, end *Event) (_ time.Duration, err error) {
	if start == nil || end == nil || start.impl == nil || end.impl == nil {
		return 0, fmt.Errorf("elapsed time: a nil event: %w", ErrInvalidArgument)
	}
	if start.dev != end.dev {
		return 0, fmt.Errorf("elapsed time between events of device %d and %d: %w: the events must be of one device (record both on queues of the same device)", start.dev.ID, end.dev.ID, ErrInvalidArgument)
	}
	if !start.timing || !end.timing {
		return 0, fmt.Errorf("elapsed time: %w: an event created without timing", ErrInvalidArgument)
	}
	var entered []*Event
	defer func() {
		for _, e := range entered {
			err = errors.Join(err, e.leave())
		}
	}()
	for _, e := range []*Event{start, end} {
		e.mu.Lock()
		err := e.live("elapsed time")
		rec := e.recorded
		if err == nil && rec {
			e.enter()
			entered = append(entered, e)
		}
		e.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if !rec {
			return 0, fmt.Errorf("elapsed time: device %d: %w: an event never recorded (Record it on a queue first)", e.dev.ID, ErrInvalidArgument)
		}
	}
	d, err := end.impl.Elapsed(start.impl)
	if err != nil {
		return 0, fmt.Errorf("elapsed time between events of device %d and %d: %w", start.dev.ID, end.dev.ID, err)
	}
	return d, nil
}

// Close releases the event. Queues waiting for it still wait. It never
// waits: with a Synchronize (or Elapsed) of the event in progress, the
// driver's event is destroyed when that call returns. A second Close does
// nothing.
func (e *Event) Close() error {
	if e == nil || e.impl == nil {
		return nil
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	now := e.users == 0
	e.mu.Unlock()
	if now {
		return e.destroy()
	}
	return nil
}

// Synchronize waits for all work issued on q so far and releases what the
// queue held (staging buffers, locks, frees waiting for the work). With
// context.Background it blocks in the driver (cuStreamSynchronize; HSA: the
// queue's last signal). A context that can be cancelled is polled (the
// driver's query, backing off from 20 µs to 2 ms): cancellation returns
// ctx.Err() and leaves the queue usable and its work running.
func (q *Queue) Synchronize(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("synchronize a queue: a nil context: %w", ErrInvalidArgument)
	}
	if ctx.Done() == nil {
		return q.synchronize()
	}
	return poll(ctx, q.Query)
}

// poll calls done until it reports true or fails, or ctx is done.
func poll(ctx context.Context, done func() (bool, error)) error {
	wait := 20 * time.Microsecond
	var t *time.Timer
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Millisecond)
	}
}

// releaseBefore releases q's pending entries handed over before limit: the
// work before them completed (an event recorded after it did).
func (q *Queue) releaseBefore(limit uint64) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	done := q.takeLocked(limit)
	q.mu.Unlock()
	q.dev.release(done)
}
