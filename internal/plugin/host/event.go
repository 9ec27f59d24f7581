package host

import (
	"fmt"
	"sync"
	"time"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// NewEvent creates an event. The host's queues do their work at once, so
// an event is complete as soon as it is recorded; it keeps the time it was
// recorded for Elapsed.
func (d *device) NewEvent(timing bool) (plugin.EventImpl, error) { return &event{timing: timing}, nil }

type event struct {
	timing bool
	mu     sync.Mutex
	at     time.Time // zero until recorded
}

func (e *event) Record(plugin.QueueImpl) error {
	e.mu.Lock()
	e.at = time.Now()
	e.mu.Unlock()
	return nil
}

func (e *event) Wait(plugin.QueueImpl) error { return nil } // the work it captured is done
func (e *event) Query() (bool, error)        { return true, nil }
func (e *event) Synchronize() error          { return nil }
func (e *event) Destroy() error              { return nil }

func (e *event) Elapsed(start plugin.EventImpl) (time.Duration, error) {
	s, ok := start.(*event)
	if !ok {
		return 0, fmt.Errorf("host: elapsed time from another plugin's event: %w", sentinel.ErrInvalidArgument)
	}
	s.mu.Lock()
	t0 := s.at
	s.mu.Unlock()
	e.mu.Lock()
	t1 := e.at
	e.mu.Unlock()
	if t0.IsZero() || t1.IsZero() || !s.timing || !e.timing {
		return 0, fmt.Errorf("host: elapsed time: %w: an event not recorded or without timing", sentinel.ErrInvalidArgument)
	}
	return t1.Sub(t0), nil
}
