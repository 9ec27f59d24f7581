package cuda

import (
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Registering a range takes as long as the range (up to seconds for GiB),
// and unregistering synchronizes with the device: a lock of one range must
// not wait for either on another range (issue 19, item 7). The fake holds
// the call at a gate (fakecuda_gate) while the test locks other ranges.

// gate closes (true) or opens the fake's gate in front of API name.
func gate(t *testing.T, name string, closed bool) {
	b := append([]byte(name), 0)
	c := uintptr(0)
	if closed {
		c = 1
	}
	call(hookFn(t, "fakecuda_gate"), uintptr(unsafe.Pointer(&b[0])), c)
}

// waitGated waits until k calls wait at a gate.
func waitGated(t *testing.T, k int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); int(int32(call(hookFn(t, "fakecuda_gated")))) < k; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no call reached the gate")
	}
}

// within runs f and fails the test when it does not return in 5 s; open
// then lets the gated call go, so that f can finish before the test ends.
func within(t *testing.T, what string, open func(), f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(5 * time.Second):
		open()
		<-done
		t.Fatalf("%s waited for another range's driver call", what)
	}
}

type lockResult struct {
	dev uintptr
	err error
}

func TestLockDoesNotWaitForAnotherRegistration(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	const n = 1 << 20
	a, _ := hostBuf(t, n)
	b, _ := hostBuf(t, n)
	c, _ := hostBuf(t, n)
	_, err := d0.LockHost(b, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d0.UnlockHost(b)) })
	regs, registers := live(t, liveRegistered), calls(t, "cuMemHostRegister")

	gate(t, "cuMemHostRegister", true)
	opened := false
	open := func() {
		if !opened {
			opened = true
			gate(t, "cuMemHostRegister", false)
		}
	}
	t.Cleanup(open)
	first := make(chan lockResult, 1)
	go func() { p, err := d0.LockHost(a, n); first <- lockResult{p, err} }()
	waitGated(t, 1)
	// The same range again, from the other device: it must wait for the
	// registration in flight and share it, never register a second time.
	second := make(chan lockResult, 1)
	go func() { p, err := d1.LockHost(a+4096, 4096); second <- lockResult{p, err} }()

	within(t, "a lock inside another registration", open, func() error { _, err := d1.LockHost(b+4096, 4096); return err })
	require.NoError(t, d1.UnlockHost(b+4096))
	within(t, "an external-lock query of another range", open, func() error { _, _, err := d0.ExternalLock(c, n); return err })
	select {
	case r := <-second:
		t.Fatalf("a lock of a range being registered returned before the registration: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	open()
	r1, r2 := <-first, <-second
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, registers+1, calls(t, "cuMemHostRegister"), "registered once, shared by the second locker")
	require.Equal(t, regs+1, live(t, liveRegistered))
	require.NoError(t, d1.UnlockHost(a+4096))
	require.NoError(t, d0.UnlockHost(a))
	require.Equal(t, regs, live(t, liveRegistered))
}

func TestLockDoesNotWaitForAnUnregistration(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	const n = 1 << 20
	a, _ := hostBuf(t, n)
	b, _ := hostBuf(t, n)
	c, _ := hostBuf(t, n)
	_, err := d0.LockHost(a, n)
	require.NoError(t, err)
	_, err = d0.LockHost(b, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d0.UnlockHost(b)) })
	regs, registers := live(t, liveRegistered), calls(t, "cuMemHostRegister")

	gate(t, "cuMemHostUnregister", true)
	opened := false
	open := func() {
		if !opened {
			opened = true
			gate(t, "cuMemHostUnregister", false)
		}
	}
	t.Cleanup(open)
	unlocked := make(chan error, 1)
	go func() { unlocked <- d0.UnlockHost(a) }()
	waitGated(t, 1)
	// The range on its way out: a new lock of it waits, then registers anew.
	again := make(chan lockResult, 1)
	go func() { p, err := d1.LockHost(a, n); again <- lockResult{p, err} }()

	within(t, "a new registration of another range", open, func() error { _, err := d1.LockHost(c, n); return err })
	within(t, "a lock inside another registration", open, func() error { _, err := d1.LockHost(b+4096, 4096); return err })
	require.Equal(t, registers+1, calls(t, "cuMemHostRegister"), "c only: the lock of a waits")
	open()
	require.NoError(t, <-unlocked)
	r := <-again
	require.NoError(t, r.err)
	require.Equal(t, registers+2, calls(t, "cuMemHostRegister"), "a registered again after its unregistration")
	require.Equal(t, regs+1, live(t, liveRegistered), "a (again) and c; b was counted before")
	for _, p := range []uintptr{a, c, b + 4096} {
		require.NoError(t, d1.UnlockHost(p))
	}
	require.Equal(t, regs-1, live(t, liveRegistered))
}

// Lockers of overlapping ranges on two devices at once, with registrations
// and unregistrations outside the lock: every lock succeeds, the fake's
// registrations never overlap (it refuses), and none is left at the end.
func TestConcurrentLockersOfOverlappingRanges(t *testing.T) {
	ds := []*device{dev(t, 0), dev(t, 1)}
	const n = 1 << 16
	bufs := make([]uintptr, 3)
	for i := range bufs {
		bufs[i], _ = hostBuf(t, n)
	}
	regs := live(t, liveRegistered)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				d := ds[(g+i)%2]
				p := bufs[(g*7+i)%len(bufs)]
				var err error
				if i%3 == 0 {
					_, err = d.LockHost(p+4096, 4096) // inside: shares a registration or makes its own
				} else {
					_, err = d.LockHost(p, n)
					if err == nil {
						err = d.UnlockHost(p)
						continue
					}
				}
				if err == nil {
					err = d.UnlockHost(p + 4096)
				}
				if err != nil && !errors.Is(err, ErrAlreadyRegistered) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, regs, live(t, liveRegistered))
}
