package pinreg

import (
	"errors"
	"fmt"
	"sync"
)

// devOffset is where the fake device sees host memory.
const devOffset = 0x1000_0000_0000

var errFake = errors.New("fake driver failure")

// fakeLocker is a device that records what is vendor-locked, refuses to lock
// a range twice or unlock what it did not lock, and fails on request.
type fakeLocker struct {
	mu                      sync.Mutex
	locked                  map[uintptr]uintptr // host -> size
	external                []External
	locks, unlocks, queries int
	failLock, failUnlock    bool // fail the next call
	stillLocked             bool // a failing unlock keeps the lock (ErrStillLocked)
	failQuery               bool
	problems                []string // protocol violations seen
}

func newFake(ext ...External) *fakeLocker {
	return &fakeLocker{locked: map[uintptr]uintptr{}, external: ext}
}

func (f *fakeLocker) LockHost(p, n uintptr) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failLock {
		f.failLock = false
		return 0, errFake
	}
	for h, s := range f.locked {
		if p < h+s && h < p+n {
			f.problems = append(f.problems, fmt.Sprintf("LockHost [%#x,%#x) overlaps vendor-locked [%#x,%#x)", p, p+n, h, h+s))
		}
	}
	f.locked[p] = n
	f.locks++
	return p + devOffset, nil
}

func (f *fakeLocker) UnlockHost(p uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unlocks++
	if _, ok := f.locked[p]; !ok {
		f.problems = append(f.problems, fmt.Sprintf("UnlockHost %#x: not vendor-locked", p))
	}
	if f.failUnlock && f.stillLocked {
		f.failUnlock = false
		return fmt.Errorf("%w: %w", errFake, ErrStillLocked)
	}
	// A failing unlock still forgets the range: the registry erased it.
	delete(f.locked, p)
	if f.failUnlock {
		f.failUnlock = false
		return errFake
	}
	return nil
}

func (f *fakeLocker) ExternalLock(p, n uintptr) (External, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	if f.failQuery {
		f.failQuery = false
		return External{}, false, errFake
	}
	for _, x := range f.external {
		if p < x.Host+x.Size && x.Host < p+n {
			return x, true, nil
		}
	}
	return External{}, false, nil
}

func (f *fakeLocker) snapshot() (locks, unlocks int, locked map[uintptr]uintptr, problems []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[uintptr]uintptr, len(f.locked))
	for k, v := range f.locked {
		m[k] = v
	}
	return f.locks, f.unlocks, m, append([]string(nil), f.problems...)
}

// nopLocker locks nothing, as LLVM's host plugin: benchmarks measure the
// registry alone.
type nopLocker struct{}

func (nopLocker) LockHost(p, n uintptr) (uintptr, error) { return p, nil }
func (nopLocker) UnlockHost(uintptr) error               { return nil }
func (nopLocker) ExternalLock(uintptr, uintptr) (External, bool, error) {
	return External{}, false, nil
}
