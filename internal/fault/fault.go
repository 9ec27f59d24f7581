package fault

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Points the runtime checks.
const (
	HeapAcquire = "heap.acquire"
	PinMap      = "pin.map"
	PinLock     = "pin.lock"
	PinUnlock   = "pin.unlock" // the device refuses to unlock a chunk and keeps it locked
	MapTrim     = "map.trim"   // munmap of an aligned mapping's slack fails (ENOMEM at vm.max_map_count)
)

// ErrInjected is wrapped by every injected failure (errors.Is).
var ErrInjected = errors.New("injected fault")

// Error is an injected failure: which point, which call.
type Error struct {
	Point string
	Call  int   // 1-based call number at the point since it was armed
	Err   error // the error Arm was given (ErrInjected when none)
}

func (e *Error) Error() string {
	if e.Err == ErrInjected {
		return fmt.Sprintf("%s: call %d: %v", e.Point, e.Call, ErrInjected)
	}
	return fmt.Sprintf("%s: call %d: %v: %v", e.Point, e.Call, ErrInjected, e.Err)
}

// Unwrap gives both the injected sentinel and the caller's error.
func (e *Error) Unwrap() []error { return []error{ErrInjected, e.Err} }

type state struct {
	nth   int // 0: every call
	err   error
	calls int
	fired int
	armed bool
	gen   uint64
}

var (
	on     atomic.Bool // some point is armed: the only thing Check reads when off
	mu     sync.Mutex
	points = map[string]*state{}
	gen    uint64
	total  atomic.Int64 // failures injected since the process started
)

// Check returns the injected failure for this call of point, or nil. When
// nothing is armed it is one atomic load.
func Check(point string) error {
	if !on.Load() {
		return nil
	}
	return check(point)
}

func check(name string) error {
	mu.Lock()
	defer mu.Unlock()
	p := points[name]
	if p == nil || !p.armed {
		return nil
	}
	p.calls++
	if p.nth != 0 && p.calls != p.nth {
		return nil
	}
	p.fired++
	total.Add(1)
	return &Error{Point: name, Call: p.calls, Err: p.err}
}

// Arm makes the nth call of point from now on fail (1 = the next call), or
// every call when nth is 0, with an error wrapping ErrInjected and err (nil:
// ErrInjected alone). It restarts the point's counts. The returned function
// disarms it (idempotent; a later Arm of the same point is not disarmed).
func Arm(point string, nth int, err error) (disarm func()) {
	if nth < 0 {
		panic("fault.Arm: negative nth") // a test bug
	}
	if err == nil {
		err = ErrInjected
	}
	mu.Lock()
	defer mu.Unlock()
	gen++
	p := &state{nth: nth, err: err, armed: true, gen: gen}
	points[point] = p
	on.Store(true)
	g := gen
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if q := points[point]; q != nil && q.gen == g && q.armed {
			q.armed = false
			refresh()
		}
	}
}

// refresh turns the flag off when no point is armed. mu held.
func refresh() {
	for _, p := range points {
		if p.armed {
			on.Store(true)
			return
		}
	}
	on.Store(false)
}

// Calls returns how many times point was checked since it was last armed
// (counted only while armed).
func Calls(point string) int {
	mu.Lock()
	defer mu.Unlock()
	if p := points[point]; p != nil {
		return p.calls
	}
	return 0
}

// Fired returns how many failures point injected since it was last armed.
func Fired(point string) int {
	mu.Lock()
	defer mu.Unlock()
	if p := points[point]; p != nil {
		return p.fired
	}
	return 0
}

// Injected returns the failures injected at all points since the process
// started.
func Injected() int64 { return total.Load() }

// Reset disarms every point.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	for _, p := range points {
		p.armed = false
	}
	on.Store(false)
}
