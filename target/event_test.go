package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHostEvents(t *testing.T) {
	withPlugins(t)
	d, _ := Get(InitialDevice())
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	start, err := d.NewEvent(true)
	require.NoError(t, err)
	end, err := d.NewEvent(true)
	require.NoError(t, err)
	_, err = Elapsed(start, end)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "never recorded")
	require.NoError(t, start.Record(q))
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, end.Record(q))
	require.NoError(t, q.WaitEvent(end))
	ok, err := end.Query()
	require.NoError(t, err)
	require.True(t, ok)
	el, err := Elapsed(start, end)
	require.NoError(t, err)
	require.GreaterOrEqual(t, el, 2*time.Millisecond)
	require.NoError(t, start.Close())
	require.NoError(t, end.Close())
	require.NoError(t, end.Close(), "a second Close does nothing")
	require.ErrorIs(t, end.Record(q), ErrInvalidArgument, "a closed event")
	err = end.Synchronize(context.Background())
	require.ErrorIs(t, err, ErrInvalidArgument, "a closed event")
	require.Equal(t, 1, strings.Count(err.Error(), fmt.Sprintf("device %d", d.ID)), "the device named once: %v", err)
}

func TestEventUnsupportedAndMisuse(t *testing.T) {
	_, d := withFake(t, 0)
	_, err := d.NewEvent(false)
	require.ErrorIs(t, err, errors.ErrUnsupported, "the Go fake has no events")

	host, _ := Get(InitialDevice())
	e, err := host.NewEvent(false)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	require.ErrorIs(t, e.Record(q), ErrInvalidArgument, "a queue of another device")
	require.NoError(t, q.WaitEvent(e), "an event never recorded orders nothing")
	var nilEvent *Event
	require.ErrorIs(t, q.WaitEvent(nilEvent), ErrInvalidArgument)
}

// Queue.Synchronize with a context that can be cancelled gives up with
// ctx.Err() while the queue's work is held, leaves it usable, and releases
// what the queue held once the work is done; a nil context is refused.
func TestQueueSynchronizeCancel(t *testing.T) {
	f, d := withFake(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	t.Cleanup(f.release)
	a, err := AllocArray[byte](d, MemDevice, 4096)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Free()) })

	f.holdWork()
	src := make([]byte, 4096)
	src[0] = 42
	require.NoError(t, CopyToDevice(a, src, q)) // staged: the queue holds a staging buffer
	require.NotZero(t, d.StagingStats().InUseBytes)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	require.ErrorIs(t, q.Synchronize(ctx), context.DeadlineExceeded)
	require.Less(t, time.Since(t0), 2*time.Second)
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, q.Synchronize(ctx2), context.Canceled)
	var nilCtx context.Context
	require.ErrorIs(t, q.Synchronize(nilCtx), ErrInvalidArgument, "not a panic")
	host, err := Get(InitialDevice()) // the fake plugin has no events
	require.NoError(t, err)
	e, err := host.NewEvent(false)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	require.ErrorIs(t, e.Synchronize(nilCtx), ErrInvalidArgument, "not a panic")
	require.NotZero(t, d.StagingStats().InUseBytes, "nothing released while the work is held")

	f.release()
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	require.NoError(t, q.Synchronize(ctx3))
	require.Zero(t, d.StagingStats().InUseBytes, "released once done")
	back := make([]byte, 4096)
	require.NoError(t, CopyFromDevice(back, a, q), "the queue is usable")
	require.NoError(t, q.Synchronize(ctx3))
	require.Equal(t, byte(42), back[0])
}
