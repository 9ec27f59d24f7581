package target

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
)

func TestArrayChecks(t *testing.T) {
	_, d := withFake(t, 0)
	_, err := AllocArray[*int](d, MemDevice, 4)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "holds Go pointers")
	_, err = AllocArray[float32](d, MemDevice, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = arrayOf[float64](memory{Device: d, Addr: 4096, Size: 12})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "not a whole number of 8-byte elements")

	a, err := AllocArray[int32](d, MemDevice, 100)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Free()) })
	require.Equal(t, 100, a.Len())
	for _, bad := range [][2]int{{-1, 2}, {5, 4}, {0, 101}} {
		_, err := a.Slice(bad[0], bad[1])
		require.ErrorIs(t, err, ErrInvalidArgument, "%v", bad)
	}
	part, err := a.Slice(10, 20)
	require.NoError(t, err)
	require.Equal(t, 10, part.Len())
	require.Equal(t, a.m.Addr+40, part.m.Addr)

	err = CopyToDevice(a, make([]int32, 99), nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "99 elements on the other side")
	require.ErrorIs(t, CopyFromDevice(make([]int32, 5), part, nil), ErrInvalidArgument)
	require.ErrorIs(t, CopyArray(a, part, nil), ErrInvalidArgument)
	require.ErrorIs(t, CopyToDevice(Array[int32]{}, nil, nil), ErrInvalidArgument)
	require.NoError(t, CopyToDevice(Array[int32]{m: memory{Device: d, Addr: 1}}, nil, nil), "nothing to copy")
}

func TestTypedRoundTrip(t *testing.T) {
	for _, name := range []string{"host", "fake"} {
		t.Run(name, func(t *testing.T) {
			var d *Device
			if name == "host" {
				withPlugins(t)
				d, _ = Get(InitialDevice())
			} else {
				_, d = withFake(t, 200*time.Microsecond)
			}
			const n = 300_000
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(i) / 3
			}
			a, err := AllocArray[float64](d, MemDevice, n)
			require.NoError(t, err)
			b, err := AllocArray[float64](d, MemDevice, n)
			require.NoError(t, err)
			q, err := d.NewQueue()
			require.NoError(t, err)
			require.NoError(t, CopyToDevice(a, xs, q))
			require.NoError(t, CopyArray(b, a, q))
			back := make([]float64, n)
			require.NoError(t, CopyFromDevice(back, b, q))
			require.NoError(t, q.Synchronize(context.Background()))
			require.Equal(t, xs, back)

			// Parts: the second half of a into the first half of b.
			lo, err := b.Slice(0, n/2)
			require.NoError(t, err)
			hi, err := a.Slice(n/2, n)
			require.NoError(t, err)
			require.NoError(t, CopyArray(lo, hi, nil))
			half := make([]float64, n/2)
			require.NoError(t, CopyFromDevice(half, lo, nil))
			require.Equal(t, xs[n/2:], half)

			require.NoError(t, q.Close())
			require.NoError(t, a.Free())
			require.NoError(t, b.Free())
		})
	}
}

// A queued copy from a Go slice the program drops at once still reads the
// slice: the queue keeps it reachable and pinned until the copy ran (the
// fake performs copies late, and not at all while held).
func TestQueuedCopyKeepsGoMemory(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 1 << 20 // above the staging threshold: the copy reads the slice itself
	a, err := AllocArray[byte](d, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Free()) })
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	t.Cleanup(f.release) // before Close waits for the queue

	f.holdWork()
	wp := func() weak.Pointer[byte] {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		require.NoError(t, CopyToDevice(a, src, q))
		return weak.Make(&src[0])
	}()
	for range 3 {
		runtime.GC()
	}
	require.NotNil(t, wp.Value(), "the source of a queued copy was collected before the copy ran")
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	back := make([]byte, n)
	require.NoError(t, CopyFromDevice(back, a, nil))
	for i := range back {
		if back[i] != byte(i*7) {
			t.Fatalf("byte %d: %d, want %d", i, back[i], byte(i*7))
		}
	}
	gone := false
	for range 20 {
		runtime.GC()
		if wp.Value() == nil {
			gone = true
			break
		}
	}
	require.True(t, gone, "released once the copy completed")
}
