package device

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/stretchr/testify/require"
)

// hostOnly rediscovers with no accelerator plugin: device 0 is the host.
func hostOnly(t *testing.T) *Device {
	t.Helper()
	require.NoError(t, Shutdown())
	restore := ReplaceVendors(nil)
	t.Cleanup(func() {
		require.NoError(t, Shutdown())
		restore()
	})
	d, err := Get(0)
	require.NoError(t, err)
	require.True(t, d.IsHost())
	return d
}

// page maps one page of host memory for the test.
func page(t *testing.T) (uintptr, uintptr) {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	n := uintptr(os.Getpagesize())
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Unmap(p, n) })
	return p, n
}

// hold holds [p, p+n) on d, skipping when the kernel refuses to lock.
func hold(t *testing.T, d *Device, p, n uintptr, hugeTLB bool) {
	t.Helper()
	if _, err := d.Hold(p, n, "the test", hugeTLB); err != nil {
		t.Skipf("cannot lock a page here: %v", err)
	}
}

func TestShutdownRefusedWhileHeld(t *testing.T) {
	d := hostOnly(t)
	p, n := page(t)
	hold(t, d, p, n, false)
	w := Current()

	err := Shutdown()
	require.ErrorIs(t, err, ErrBusy)
	require.Same(t, w, Current(), "a refused Shutdown changes nothing")
	require.NoError(t, d.Usable())

	locks, mapped, err := d.Release(p)
	require.NoError(t, err)
	require.Zero(t, locks+mapped)
	require.NoError(t, Shutdown())
	require.Nil(t, Current())
	require.ErrorIs(t, d.Usable(), ErrShutdown, "a device of a closed world")
	_, err = d.Hold(p, n, "the test", false)
	require.ErrorIs(t, err, ErrShutdown)
}

func TestHugeTLBRangesFollowHolds(t *testing.T) {
	d := hostOnly(t)
	p, n := page(t)
	q, m := page(t)
	hold(t, d, p, n, true)
	hold(t, d, q, m, false)
	require.Equal(t, []Range{{Start: p, Size: n, Device: d.ID}}, HugeTLBRanges(), "only the hold said hugetlb")
	_, _, err := d.Release(p)
	require.NoError(t, err)
	_, _, err = d.Release(q)
	require.NoError(t, err)
	require.Empty(t, HugeTLBRanges())
}

// released is what the BeforeShutdown function of
// TestBeforeShutdownRunsFirst releases (0: nothing).
var released atomic.Pointer[func()]

func init() {
	BeforeShutdown(func() {
		if f := released.Load(); f != nil {
			(*f)()
		}
	})
}

func TestBeforeShutdownRunsFirst(t *testing.T) {
	d := hostOnly(t)
	p, n := page(t)
	hold(t, d, p, n, false)
	f := func() { _, _, _ = d.Release(p) }
	released.Store(&f)
	t.Cleanup(func() { released.Store(nil) })
	require.NoError(t, Shutdown(), "the function run before the check released the hold")
}

// fakeLayer records what the core asks of a layer.
type fakeLayer struct {
	calls []string
	err   error
}

func (l *fakeLayer) AfterUse(p, n uintptr, left *atomic.Int64, done func()) {
	l.calls = append(l.calls, "AfterUse")
}
func (l *fakeLayer) SyncQueues() { l.calls = append(l.calls, "SyncQueues") }
func (l *fakeLayer) Close() (func(), error) {
	l.calls = append(l.calls, "Close")
	return func() { l.calls = append(l.calls, "after") }, l.err
}
func (l *fakeLayer) Public() any { return l }

func TestLayerAttachedOnceAndClosedWithTheDevice(t *testing.T) {
	d := hostOnly(t)
	require.Nil(t, d.Layer(), "no layer until one is attached")
	made := 0
	l := &fakeLayer{err: errors.New("a queue failed")}
	mk := func(*Device) Layer { made++; return l }
	require.Same(t, l, d.Attach(mk))
	require.Same(t, l, d.Attach(mk))
	require.Equal(t, 1, made)
	require.Same(t, l, d.Layer())

	err := Shutdown()
	require.ErrorIs(t, err, l.err, "the layer's close error comes back")
	require.Equal(t, []string{"SyncQueues", "Close", "after"}, l.calls, "queues waited for before the hooks, the layer closed before the Impl, after once it closed")
}

func TestFreeAfterUseWithNothingInFlight(t *testing.T) {
	hostOnly(t)
	p, n := page(t)
	require.False(t, HostInUse())
	require.False(t, FreeAfterUse(p, n, func() { t.Fatal("nothing in flight: the caller frees") }))
}

func TestBadDevice(t *testing.T) {
	hostOnly(t)
	_, err := Get(1)
	require.ErrorIs(t, err, ErrBadDevice)
	require.Contains(t, err.Error(), "the only device is 0, the host")
	_, err = Get(-1)
	require.ErrorIs(t, err, ErrBadDevice)
}
