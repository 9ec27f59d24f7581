package amdgpu

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// scratchOf is the device's marker buffer, 0 when it has none.
func scratchOf(d *device) uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scratch
}

// The marker buffer of a device's events is made at its first event, from
// the GPU's fine-grained pool, and goes with the device: Close frees it and
// forgets it. Before the fix it came from the coarse-grained pool and
// stayed in a package-level map keyed by the closed device (this test,
// reading that map, failed on "still referenced").
func TestEventScratchGoesWithDevice(t *testing.T) {
	d := fakeDevices(t)[0]
	allocs := count(t, "allocs")
	qi, err := d.NewQueue()
	require.NoError(t, err)
	ev, err := d.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, ev.Record(qi))
	require.NoError(t, ev.Synchronize())
	require.NotZero(t, scratchOf(d))
	require.Same(t, d.pools.fine, d.scratchPool, "a fine-grained pool suffices for markers")
	require.Equal(t, allocs+1, count(t, "allocs"), "one buffer for the device's markers")
	require.NoError(t, ev.Destroy())
	require.NoError(t, qi.Destroy())
	require.NoError(t, d.Close())
	require.Zero(t, scratchOf(d), "the closed device's buffer is still referenced")
	require.Equal(t, allocs, count(t, "allocs"))
}

// fakeCopyProfiling turns the runtime's async copy profiling on or off
// behind the plugin's back, as another user of the runtime may.
func fakeCopyProfiling(t *testing.T, d *device, on bool) {
	t.Helper()
	v := uintptr(0)
	if on {
		v = 1
	}
	require.NoError(t, d.fn.status("hsa_amd_profiling_async_copy_enable", d.fn.copyProfEnable, v))
}

// The fake's async copy profiling follows hsa_ext_amd.h and ROCr: a copy
// carries timestamps only if profiling was on when it was submitted, in
// its completion signal; a signal that was no copy's completion signal is
// HSA_STATUS_ERROR, an invalid one HSA_STATUS_ERROR_INVALID_SIGNAL, a NULL
// time HSA_STATUS_ERROR_INVALID_ARGUMENT.
func TestFakeCopyTimestamps(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestFakeCopyTimestamps", "FAKEHSA_COPY_DELAY_US=0") {
		return
	}
	d := fakeDevices(t)[0]
	fn := d.fn
	require.NotZero(t, fn.copyTime, "the fake exports hsa_amd_profiling_get_async_copy_time")
	buf, err := d.Alloc(plugin.MemDevice, 64)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Free(plugin.MemDevice, buf)) })
	copyOnce := func() (copyTime, error) {
		sig, err := fn.newSignal()
		require.NoError(t, err)
		defer func() { require.NoError(t, fn.destroySignal(sig)) }()
		require.NoError(t, fn.asyncCopy(buf+32, d.agent, buf, d.agent, 8, 0, sig))
		fn.waitZero(sig)
		var ts copyTime
		err = fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(sig), uintptr(unsafe.Pointer(&ts)))
		return ts, err
	}
	fakeCopyProfiling(t, d, false)
	ts, err := copyOnce()
	require.NoError(t, err)
	require.Equal(t, copyTime{}, ts, "a copy submitted with profiling off has no timestamps")
	fakeCopyProfiling(t, d, true)
	t.Cleanup(func() { fakeCopyProfiling(t, d, false) })
	ts, err = copyOnce()
	require.NoError(t, err)
	require.NotZero(t, ts.start)
	require.LessOrEqual(t, ts.start, ts.end)

	sig, err := fn.newSignal()
	require.NoError(t, err)
	err = fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(sig), uintptr(unsafe.Pointer(&ts)))
	code := func(err error) int {
		var he *Error
		require.ErrorAs(t, err, &he)
		return he.Code
	}
	require.Equal(t, 0x1000, code(err), "HSA_STATUS_ERROR: never a copy's completion signal")
	err = fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(sig), 0)
	require.Equal(t, 0x1001, code(err), "HSA_STATUS_ERROR_INVALID_ARGUMENT: a NULL time")
	require.NoError(t, fn.destroySignal(sig))
	err = fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(sig), uintptr(unsafe.Pointer(&ts)))
	require.Equal(t, 0x1006, code(err), "HSA_STATUS_ERROR_INVALID_SIGNAL: a destroyed signal")
}

// Elapsed between two timing events of one device is the time between
// their markers' completions, from the runtime's copy timestamps: at least
// the fake's copy delay (the end marker is submitted after the start one
// completed, and the fake performs no copy before its delay passed), at
// most what the host saw. Not complete yet: plugin.ErrNotReady; without
// timing, or events of two devices: sentinel.ErrInvalidArgument; markers recorded while
// another user turned profiling off: errors.ErrUnsupported saying so.
// Before the fix every Elapsed was errors.ErrUnsupported.
func TestEventElapsed(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestEventElapsed", "FAKEHSA_COPY_DELAY_US=3000") {
		return
	}
	ds := fakeDevices(t)
	d := ds[0]
	qi, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, qi.Destroy()) })
	newEvent := func(d *device, timing bool) plugin.EventImpl {
		ev, err := d.NewEvent(timing)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, ev.Destroy()) })
		return ev
	}
	start, end := newEvent(d, true), newEvent(d, true)

	t0 := time.Now()
	require.NoError(t, start.Record(qi))
	require.NoError(t, start.Synchronize())
	require.NoError(t, end.Record(qi))
	require.NoError(t, end.Synchronize())
	host := time.Since(t0)
	el, err := end.Elapsed(start)
	require.NoError(t, err)
	require.GreaterOrEqual(t, el, 3*time.Millisecond, "the end marker ran at least FAKEHSA_COPY_DELAY_US after the start one completed")
	require.LessOrEqual(t, el, host)
	back, err := start.Elapsed(end)
	require.NoError(t, err)
	require.Equal(t, -el, back)

	hsaGate(t, "copy", true)
	require.NoError(t, end.Record(qi))
	_, err = end.Elapsed(start)
	require.ErrorIs(t, err, plugin.ErrNotReady)
	hsaGate(t, "copy", false)
	require.NoError(t, end.Synchronize())
	_, err = end.Elapsed(start)
	require.NoError(t, err)

	plain := newEvent(d, false)
	require.NoError(t, plain.Record(qi))
	require.NoError(t, plain.Synchronize())
	_, err = plain.Elapsed(start)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	other := newEvent(ds[1], true)
	q1, err := ds[1].NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q1.Destroy()) })
	require.NoError(t, other.Record(q1))
	require.NoError(t, other.Synchronize())
	_, err = other.Elapsed(start)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	require.ErrorContains(t, err, "two devices")

	fakeCopyProfiling(t, d, false)
	require.NoError(t, end.Record(qi))
	require.NoError(t, end.Synchronize())
	_, err = end.Elapsed(start)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "turned off")
}
