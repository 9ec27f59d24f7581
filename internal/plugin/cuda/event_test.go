package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// An event belongs to the context it was created in. The fake follows the
// reference: cuEventRecord of an event on a stream of another context is
// CUDA_ERROR_INVALID_HANDLE ("hEvent and hStream must be from the same
// context"), cuEventElapsedTime of events of two devices fails ("will fail
// if the two input events are associated to different devices"), while
// cuStreamWaitEvent takes an event of another device. The plugin refuses the
// first two itself, with a message saying why. Before the fix the fake
// recorded device 0's event on device 1's stream and timed events of two
// devices (durations of no meaning on real hardware: each device has its
// own clock).
func TestEventsOfOneContext(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	q0i, err := d0.NewQueue()
	require.NoError(t, err)
	q0 := q0i.(*Queue)
	t.Cleanup(func() { require.NoError(t, q0.Destroy()) })
	q1i, err := d1.NewQueue()
	require.NoError(t, err)
	q1 := q1i.(*Queue)
	t.Cleanup(func() { require.NoError(t, q1.Destroy()) })
	e0i, err := d0.NewEvent(true)
	require.NoError(t, err)
	e0 := e0i.(*devEvent)
	t.Cleanup(func() { require.NoError(t, e0.Destroy()) })
	e1i, err := d1.NewEvent(true)
	require.NoError(t, err)
	e1 := e1i.(*devEvent)
	t.Cleanup(func() { require.NoError(t, e1.Destroy()) })

	// The driver itself, called as a careless caller would.
	err = d1.withCtx("cuEventRecord", func() result { return call(d1.drv.cuEventRecord, e0.ev, q1.handle()) })
	require.ErrorContains(t, err, "CUDA_ERROR_INVALID_HANDLE", "the fake recorded an event on another context's stream")
	require.NoError(t, d0.withCtx("cuEventRecord", func() result { return call(d0.drv.cuEventRecord, e0.ev, q0.handle()) }))
	require.NoError(t, d1.withCtx("cuEventRecord", func() result { return call(d1.drv.cuEventRecord, e1.ev, q1.handle()) }))
	require.NoError(t, e0.Synchronize())
	require.NoError(t, e1.Synchronize())
	var ms uint32
	err = d0.withCtx("cuEventElapsedTime", func() result {
		return call(d0.drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), e0.ev, e1.ev)
	})
	require.ErrorContains(t, err, "CUDA_ERROR_INVALID_HANDLE", "the fake timed events of two devices")
	require.NoError(t, e1.Wait(q0), "a stream waits for another device's event")

	// The plugin says what is wrong before the driver does.
	require.ErrorIs(t, e0.Record(q1), sentinel.ErrInvalidArgument)
	require.ErrorContains(t, e0.Record(q1), "another device")
	_, err = e1.Elapsed(e0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	require.ErrorContains(t, err, "two devices")
	_, err = e0.Elapsed(e0)
	require.NoError(t, err)
	var _ plugin.EventImpl = e0
}
