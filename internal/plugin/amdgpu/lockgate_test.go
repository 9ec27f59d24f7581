package amdgpu

import (
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// hsa_amd_memory_unlock waits for the GPU's work on the range and a lock of
// a big range takes long: a lock, unlock or copy of another range must not
// wait for either (issue 19, item 7). The fake holds the call at a gate
// (fakehsa_gate) while the test works on other ranges.

func hsaGate(t *testing.T, fn string, closed bool) {
	h, err := purego.Dlopen(fakePath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	require.NoError(t, err)
	g, err := purego.Dlsym(h, "fakehsa_gate")
	require.NoError(t, err)
	b := append([]byte(fn), 0)
	c := uintptr(0)
	if closed {
		c = 1
	}
	purego.SyscallN(g, uintptr(unsafe.Pointer(&b[0])), c)
}

// gateFor closes fn's gate until the returned open (idempotent, also run at
// cleanup) and waits until a call of it waits there after start ran.
func gateFor(t *testing.T, fn string, start func()) (open func()) {
	t.Helper()
	hsaGate(t, fn, true)
	opened := false
	open = func() {
		if !opened {
			opened = true
			hsaGate(t, fn, false)
		}
	}
	t.Cleanup(open)
	start()
	for deadline := time.Now().Add(10 * time.Second); count(t, "gated") == 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no call of %s reached the gate", fn)
	}
	return open
}

// completes runs f and fails the test when it does not return in 5 s.
func completes(t *testing.T, what string, open func(), f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(5 * time.Second):
		open()
		<-done
		t.Fatalf("%s waited for another range's lock or unlock", what)
	}
}

func TestLockTableUnlockOutsideMutex(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	a, b, c := hostBuffer(t, n), hostBuffer(t, n), hostBuffer(t, n)
	pattern(c, n, 3)
	_, err := ds[0].LockHost(a, n)
	require.NoError(t, err)
	_, err = ds[0].LockHost(c, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].UnlockHost(c)) }()
	v, err := ds[1].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, v)) }()
	calls := count(t, "lock_calls")

	unlocked := make(chan error, 1)
	open := gateFor(t, "hsa_amd_memory_unlock", func() { go func() { unlocked <- ds[0].UnlockHost(a) }() })
	relock := make(chan error, 1)
	go func() { _, err := ds[1].LockHost(a, n); relock <- err }() // waits for a's unlock to land

	completes(t, "a lock of another range", open, func() error { _, err := ds[0].LockHost(b, n); return err })
	completes(t, "a lock inside another locked range", open, func() error { _, err := ds[1].LockHost(c+4096, 4096); return err })
	completes(t, "a copy from another locked range", open, func() error { return ds[1].Copy(v, c, n, plugin.HostToDevice, nil) })
	completes(t, "an unlock inside another locked range", open, func() error { return ds[1].UnlockHost(c + 4096) })
	require.Equal(t, calls+1, count(t, "lock_calls"), "b only: the lock of a waits for its unlock")
	open()
	require.NoError(t, <-unlocked)
	require.NoError(t, <-relock)
	require.Equal(t, calls+2, count(t, "lock_calls"), "a locked anew after its unlock landed")
	require.NoError(t, ds[1].UnlockHost(a))
	require.NoError(t, ds[0].UnlockHost(b))
}

func TestLockTableLockOutsideMutex(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	a, c, e := hostBuffer(t, n), hostBuffer(t, n), hostBuffer(t, n)
	_, err := ds[0].LockHost(c, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].UnlockHost(c)) }()
	_, err = ds[0].LockHost(e, n)
	require.NoError(t, err)
	calls := count(t, "lock_calls")

	first := make(chan error, 1)
	open := gateFor(t, "hsa_amd_memory_lock", func() { go func() { _, err := ds[0].LockHost(a, n); first <- err }() })
	second := make(chan error, 1)
	go func() { _, err := ds[1].LockHost(a+4096, 4096); second <- err }() // shares a's lock once it lands

	completes(t, "a lock inside another locked range", open, func() error { _, err := ds[1].LockHost(c+4096, 4096); return err })
	completes(t, "an unlock of another range", open, func() error { return ds[0].UnlockHost(e) })
	completes(t, "an external-lock query of another range", open, func() error { _, _, err := ds[1].ExternalLock(e, n); return err })
	require.NoError(t, ds[1].UnlockHost(c+4096))
	select {
	case err := <-second:
		t.Fatalf("a lock inside a range being locked returned before it was locked: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Equal(t, calls+1, count(t, "lock_calls"), "one runtime lock of a, shared")
	require.NoError(t, ds[1].UnlockHost(a+4096))
	require.NoError(t, ds[0].UnlockHost(a))
	require.Empty(t, func() map[uintptr]int {
		m := ds[0].tab.Snapshot()
		delete(m, c)
		return m
	}())
}

// Locks, unlocks and copies of overlapping ranges from two devices at once,
// with the runtime's calls outside the table's mutex: every call succeeds
// or is refused by name (ErrOverlap), and nothing stays locked.
func TestLockTableConcurrent(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	bufs := []uintptr{hostBuffer(t, n), hostBuffer(t, n)}
	vs := make([]uintptr, 2)
	for i, d := range ds {
		v, err := d.Alloc(plugin.MemDevice, n)
		require.NoError(t, err)
		vs[i] = v
		defer func() { require.NoError(t, d.Free(plugin.MemDevice, v)) }()
	}
	locks := count(t, "locks")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				k := (g + i) % 2
				d, p := ds[k], bufs[(g*3+i)%2]
				var err error
				switch i % 3 {
				case 0:
					if _, err = d.LockHost(p, n); err == nil {
						err = d.UnlockHost(p)
					}
				case 1:
					if _, err = d.LockHost(p+4096, 4096); err == nil {
						err = d.UnlockHost(p + 4096)
					}
				case 2:
					err = d.Copy(vs[k], p+100, n-200, plugin.HostToDevice, nil)
				}
				if err != nil && !errors.Is(err, ErrOverlap) {
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
	require.Equal(t, locks, count(t, "locks"))
	require.Empty(t, ds[0].tab.Snapshot())
}
