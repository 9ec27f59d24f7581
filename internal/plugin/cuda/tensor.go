package cuda

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// tensorSyms are the optional symbols of events between queues.
type tensorSyms struct {
	cuStreamWaitEvent, cuEventElapsedTime uintptr
}

func (t *tensorSyms) tensorTable(opt func(string, *uintptr) entry) []entry {
	return []entry{
		opt("cuStreamWaitEvent", &t.cuStreamWaitEvent),
		opt("cuEventElapsedTime", &t.cuEventElapsedTime),
	}
}

// NewEvent creates a CUDA event with eventFlags (CU_EVENT_DISABLE_TIMING
// unless timing; CU_EVENT_BLOCKING_SYNC unless OMPALLOC_CUDA_SCHED asks for
// spinning).
func (d *device) NewEvent(timing bool) (plugin.EventImpl, error) {
	drv := d.drv
	if drv.cuEventCreate == 0 || drv.cuEventRecord == 0 || drv.cuEventQuery == 0 ||
		drv.cuEventSynchronize == 0 || drv.cuEventDestroy == 0 || drv.cuStreamWaitEvent == 0 {
		return nil, fmt.Errorf("%v: events missing in %s: %w", d, drv.lib.Path, errors.ErrUnsupported)
	}
	flags := d.eventFlags(timing)
	var ev uintptr
	if err := d.withCtx("cuEventCreate", func() result {
		return call(drv.cuEventCreate, uintptr(unsafe.Pointer(&ev)), flags)
	}); err != nil {
		return nil, err
	}
	return &devEvent{Event: Event{d: d, ev: ev}}, nil
}

// devEvent is an Event that other queues wait for and that times.
type devEvent struct {
	Event
}

func stream(q plugin.QueueImpl, what string) (*Queue, uintptr, error) {
	cq, ok := q.(*Queue)
	if !ok {
		return nil, 0, fmt.Errorf("%s: %w: not a CUDA queue", what, sentinel.ErrInvalidArgument)
	}
	s, err := cq.live(what)
	return cq, s, err
}

// Record is cuEventRecord on q's stream, which must be of the event's
// device: "hEvent and hStream must be from the same context otherwise
// CUDA_ERROR_INVALID_HANDLE is returned".
func (e *devEvent) Record(q plugin.QueueImpl) error {
	cq, s, err := stream(q, "record an event")
	if err != nil {
		return err
	}
	if cq.d != e.d {
		return fmt.Errorf("%v: record an event on a queue of %v: %w: an event is recorded on a queue of its own device (another device's queue may wait for it)", e.d, cq.d, sentinel.ErrInvalidArgument)
	}
	return e.d.withCtx("cuEventRecord", func() result { return call(e.d.drv.cuEventRecord, e.ev, s) })
}

// Wait is cuStreamWaitEvent: q's later work waits, the host does not. The
// event may be another device's (the driver synchronizes across devices).
func (e *devEvent) Wait(q plugin.QueueImpl) error {
	cq, s, err := stream(q, "wait for an event")
	if err != nil {
		return err
	}
	return cq.d.withCtx("cuStreamWaitEvent", func() result { return call(e.d.drv.cuStreamWaitEvent, s, e.ev, 0) })
}

// Elapsed is cuEventElapsedTime(start, e), in milliseconds from the driver;
// both events of this device.
func (e *devEvent) Elapsed(start plugin.EventImpl) (time.Duration, error) {
	s, ok := start.(*devEvent)
	if !ok {
		return 0, fmt.Errorf("%v: elapsed time: %w: not a CUDA event", e.d, sentinel.ErrInvalidArgument)
	}
	if s.d != e.d {
		// The Programming Guide: "cudaEventElapsedTime() will fail if the
		// two input events are associated to different devices".
		return 0, fmt.Errorf("%v: elapsed time from an event of %v: %w: events of two devices (each has its own clock)", e.d, s.d, sentinel.ErrInvalidArgument)
	}
	if e.d.drv.cuEventElapsedTime == 0 {
		return 0, fmt.Errorf("%v: cuEventElapsedTime missing in %s: %w", e.d, e.d.drv.lib.Path, errors.ErrUnsupported)
	}
	var ms uint32 // a float, written by the driver
	var r result
	if err := e.d.withCtx("cuEventElapsedTime", func() result {
		r = call(e.d.drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), s.ev, e.ev)
		return r
	}); err != nil {
		if r == cudaErrorNotReady {
			return 0, fmt.Errorf("%w: %w", plugin.ErrNotReady, err)
		}
		return 0, err
	}
	return time.Duration(float64(math.Float32frombits(ms)) * float64(time.Millisecond)), nil
}
