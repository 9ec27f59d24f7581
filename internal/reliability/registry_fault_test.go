package reliability

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

var errLockerFault = errors.New("injected locker fault")

// faultyLocker is a device's lock and unlock whose next calls can be made
// to fail, counting what it holds locked.
type faultyLocker struct {
	mu                         sync.Mutex
	failLock, failUnlock, fail bool // fail: ExternalLock
	held                       map[uintptr]uintptr
}

func (l *faultyLocker) LockHost(p, n uintptr) (uintptr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failLock {
		return 0, fmt.Errorf("mlock %#x+%d: %w", p, n, errLockerFault)
	}
	l.held[p] = n
	return p, nil
}

func (l *faultyLocker) UnlockHost(p uintptr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failUnlock {
		return fmt.Errorf("munlock %#x: %w", p, errLockerFault)
	}
	delete(l.held, p)
	return nil
}

func (l *faultyLocker) ExternalLock(p, n uintptr) (pinreg.External, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return pinreg.External{}, false, errLockerFault
	}
	return pinreg.External{}, false, nil
}

func (l *faultyLocker) set(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// The registry under lock, unlock and query failures of its device: a
// failed lock leaves no entry and no reference, a failed unlock erases the
// entry and says so (the device keeps what it could not release: the
// Locker's own business, see the CUDA and HSA tests), other entries keep
// their references, and the next operations succeed.
func TestRegistryLockerFaults(t *testing.T) {
	l := &faultyLocker{held: map[uintptr]uintptr{}}
	r := pinreg.New(l)
	sentinel := hostBuf(t, 1<<16)
	_, err := r.Lock(sentinel, 1<<16)
	require.NoError(t, err)
	buf := hostBuf(t, 1<<16)
	faults := 0

	l.set(func() { l.failLock = true })
	_, err = r.Lock(buf, 4096)
	require.ErrorIs(t, err, errLockerFault)
	_, _, err = r.LockMapped(buf, 4096, pinreg.MapMandatory)
	require.ErrorIs(t, err, errLockerFault)
	_, locked, err := r.LockMapped(buf, 4096, pinreg.MapOn)
	require.False(t, locked, "on: the failure is ignored, nothing is locked")
	_ = err
	l.set(func() { l.failLock = false })
	faults += 3
	require.Equal(t, 1, r.Len())
	require.False(t, r.IsPinned(buf))

	l.set(func() { l.fail = true })
	_, err = r.Lock(buf, 4096)
	require.ErrorIs(t, err, errLockerFault)
	l.set(func() { l.fail = false })
	faults++
	require.Equal(t, 1, r.Len())
	require.Len(t, l.held, 1, "LockHost was not called after ExternalLock failed")

	_, err = r.Lock(buf, 4096)
	require.NoError(t, err, "the next lock succeeds")
	l.set(func() { l.failUnlock = true })
	err = r.Unlock(buf)
	require.ErrorIs(t, err, errLockerFault)
	l.set(func() { l.failUnlock = false })
	faults++
	require.False(t, r.IsPinned(buf), "the entry is erased all the same")
	require.Equal(t, 1, r.Len())

	e, ok := r.Entry(sentinel)
	require.True(t, ok)
	require.Equal(t, 1, e.Refs, "the sentinel lock is intact")
	require.NoError(t, r.Unlock(sentinel))
	require.Zero(t, r.Len())
	st := r.Stats()
	require.Equal(t, uint64(4), st.LockFailures)
	require.Equal(t, uint64(1), st.UnlockFailures)
	survived(faults)
}

// A real mlock failure: RLIMIT_MEMLOCK of 64 KiB without CAP_IPC_LOCK, in
// a child. Locks and host-pinned target allocations fail with a warning
// naming the limit, pinned allocators obey their fallbacks, and nothing
// stays locked or registered.
func TestMemlockLimitChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		for _, tool := range []string{"setpriv", "prlimit"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("%s not found (util-linux): %v", tool, err)
			}
		}
		cmd := exec.Command("setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock",
			"prlimit", "--memlock=65536:65536", os.Args[0], "-test.run=^TestMemlockLimitChild$", "-test.v", "-test.count=1")
		cmd.Env = append(childEnviron(), "OMPALLOC_DISABLE_CUDA=1", "OMPALLOC_DISABLE_HSA=1")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "setpriv:") {
			t.Skipf("setpriv cannot drop CAP_IPC_LOCK here: %s", out)
		}
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestMemlockLimitChild")
		survived(4)
		return
	}
	base := snapshot()
	h := kmp.GetInitialDevice()
	d, err := target.Get(h)
	require.NoError(t, err)
	buf := hostBuf(t, 1<<20)
	warnsOnce(t, func() { mustNil(kmp.TargetLockMem(cmem2ptr(buf), 1<<20, h)) }, "RLIMIT_MEMLOCK")
	warnsOnce(t, func() { mustNil(kmp.TargetAllocHost(1<<20, h)) }, "RLIMIT_MEMLOCK")
	nullFb, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	defFb, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.DefaultMemFb))
	require.NoError(t, err)
	// The pinned-bytes limit follows RLIMIT_MEMLOCK (64 KiB): a chunk is
	// locked only that far, so a small block is served pinned, a larger one
	// is a failed pin.
	small, err := nullFb.Alloc(1000)
	require.NoError(t, err)
	require.True(t, registered(d.Registry(), uintptr(small)))
	p, err := nullFb.Alloc(200 << 10)
	require.Nil(t, p)
	require.ErrorIs(t, err, alloc.ErrPinFailed)
	p, err = defFb.Alloc(200 << 10)
	require.NoError(t, err)
	require.False(t, registered(d.Registry(), uintptr(p)))
	pattern(bytesAt(p, 200<<10), 1)
	require.NoError(t, alloc.Free(p))
	require.NoError(t, alloc.Free(small))
	require.NoError(t, nullFb.Destroy())
	require.NoError(t, defFb.Destroy())
	require.Zero(t, d.Registry().Stats().Entries)
	requireSame(t, base, "memlock limit")
}
