package plugin

import (
	"errors"
	"time"
)

// ErrNotReady is wrapped by EventImpl.Elapsed when an event's work has not
// completed yet (CUDA_ERROR_NOT_READY; on HSA a marker signal not yet 0).
var ErrNotReady = errors.New("event not complete yet")

// Eventer is implemented by an Impl whose queues record events (CUDA
// events; on HSA a signal that completes after the queue's earlier work).
// target's Events are built on it; without it, recording an event fails
// with errors.ErrUnsupported.
type Eventer interface {
	// NewEvent creates an event, able to time (Elapsed) when timing is
	// true (CUDA: without CU_EVENT_DISABLE_TIMING).
	NewEvent(timing bool) (EventImpl, error)
}

// EventImpl is one event of a device.
type EventImpl interface {
	// Record captures the work issued on q so far (q is a queue of the
	// event's device): the event completes once that work has, never
	// before. Recording again captures the new point.
	Record(q QueueImpl) error
	// Wait makes the work issued on q after it wait for the work the event
	// captured, without blocking the host (cuStreamWaitEvent; an HSA
	// dependent signal). q may belong to another device of the same plugin.
	// An event never recorded orders nothing.
	Wait(q QueueImpl) error
	// Query reports whether the captured work has completed (true for an
	// event never recorded).
	Query() (bool, error)
	// Synchronize blocks until the captured work has completed.
	Synchronize() error
	// Elapsed is the time between start's completion and this event's
	// (cuEventElapsedTime); both must be recorded, complete (else an error
	// wrapping ErrNotReady) and timing events of this device.
	// errors.ErrUnsupported where the driver cannot time.
	Elapsed(start EventImpl) (time.Duration, error)
	// Destroy releases the event; pending waits on it stay valid.
	Destroy() error
}
