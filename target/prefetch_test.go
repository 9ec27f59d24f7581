package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const prefetchChildEnv = "OMPALLOC_TARGET_PREFETCH_CHILD"

// TestPrefetchFakeDrivers runs the prefetcher's and Device.Synchronize's
// tests in a child whose devices are a fake CUDA device (0), a fake AMD
// GPU (1) and the host (2): copies performed late by driver threads, so a
// buffer reused before its copy ran shows in the data.
func TestPrefetchFakeDrivers(t *testing.T) {
	if os.Getenv(prefetchChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrefetchFakeDriversChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), prefetchChildEnv+"=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=1", "FAKECUDA_COPY_DELAY_US=300", "FAKECUDA_FAIL=",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=1", "FAKEHSA_COPY_DELAY_US=300", "FAKEHSA_FAIL=",
		"OMPALLOC_DISABLE_CUDA=", "OMPALLOC_DISABLE_HSA=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestPrefetchFakeDriversChild", "%s", out)
	t.Logf("%s", out)
}

func TestPrefetchFakeDriversChild(t *testing.T) {
	if os.Getenv(prefetchChildEnv) == "" {
		t.Skip("run by TestPrefetchFakeDrivers")
	}
	require.Equal(t, 2, NumDevices())
	for _, d := range Devices() {
		t.Run(d.String(), func(t *testing.T) {
			for _, buffers := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("data/%d buffers", buffers), func(t *testing.T) { prefetchData(t, d, buffers) })
			}
			t.Run("errors", func(t *testing.T) { prefetchErrors(t, d) })
			if !d.IsHost() {
				t.Run("cancel", func(t *testing.T) { prefetchCancel(t, d) })
				t.Run("synchronize", func(t *testing.T) { deviceSynchronize(t, d) })
			}
		})
	}
}

const pfBatch = 1 << 14 // elements per batch

func batchValue(i, j int) float32 { return float32(i*100000 + j) }

// produceBatches fills batch i, stopping after total elements.
func produceBatches(total int) func(i int, host []float32) (int, error) {
	return func(i int, host []float32) (int, error) {
		n := min(len(host), total-i*len(host))
		for j := range n {
			host[j] = batchValue(i, j)
		}
		if (i+1)*len(host) >= total {
			return n, io.EOF
		}
		return n, nil
	}
}

// prefetchData: every batch reaches the consumer's queue intact, the last
// one partial, with as many buffers as asked; the consumer's copy out of
// each device buffer runs on its own queue, after the batch's copy, and
// before the buffer is overwritten.
func prefetchData(t *testing.T, d *Device, buffers int) {
	const total = 7*pfBatch - 1000
	pf, err := NewPrefetcher[float32](d, buffers, pfBatch)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pf.Close()) })
	out, err := AllocArray[float32](d, MemDevice, total)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, out.Free()) })
	compute, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, compute.Close()) })

	var seen []int
	st, err := pf.Run(context.Background(), produceBatches(total), func(b *Batch[float32]) error {
		seen = append(seen, b.Index)
		dst, err := out.Slice(b.Index*pfBatch, b.Index*pfBatch+b.Data.Len())
		if err != nil {
			return err
		}
		if err := b.Use(compute); err != nil {
			return err
		}
		return CopyArray(dst, b.Data, compute)
	})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6}, seen)
	require.NoError(t, d.Synchronize(context.Background()))
	got := make([]float32, total)
	require.NoError(t, CopyFromDevice(got, out, nil))
	for j := range got {
		if want := batchValue(j/pfBatch, j%pfBatch); got[j] != want {
			t.Fatalf("element %d (batch %d): %v, want %v", j, j/pfBatch, got[j], want)
		}
	}
	require.Equal(t, 7, st.Batches)
	require.Equal(t, uint64(total*4), st.Bytes)
	require.Positive(t, st.Wall)
	require.GreaterOrEqual(t, st.Wall, st.Produce+st.Consume)
	require.True(t, st.Timed, "every driver here times events (HSA from its copies' timestamps)")
	require.Positive(t, st.Copy)
	require.Positive(t, st.Bandwidth)
	require.InDelta(t, 0.5, st.Overlap, 0.5)
	t.Logf("%v, %d buffers: %d batches, %d bytes in %v; stall %v, copy device time %v (%.2f GB/s), overlap %.2f",
		d, buffers, st.Batches, st.Bytes, st.Wall, st.Stall, st.Copy, st.Bandwidth/1e9, st.Overlap)

	// Run again, on the same buffers: a new stream of batches.
	seen = nil
	st, err = pf.Run(context.Background(), produceBatches(pfBatch), func(b *Batch[float32]) error {
		seen = append(seen, b.Index)
		return b.Ready.Synchronize(context.Background())
	})
	require.NoError(t, err)
	require.Equal(t, []int{0}, seen)
	require.Equal(t, 1, st.Batches)
}

// prefetchErrors: bad arguments, and the producer's and consumer's errors.
func prefetchErrors(t *testing.T, d *Device) {
	_, err := NewPrefetcher[float32](d, 0, 16)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewPrefetcher[float32](d, 2, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = NewPrefetcher[float32](nil, 2, 16)
	require.ErrorIs(t, err, ErrInvalidArgument)

	pf, err := NewPrefetcher[float32](d, 2, 16)
	require.NoError(t, err)
	errProduce, errConsume := errors.New("producer failed"), errors.New("consumer failed")
	ctx := context.Background()
	_, err = pf.Run(ctx, func(i int, host []float32) (int, error) {
		if i == 3 {
			return 0, errProduce
		}
		return len(host), nil
	}, func(*Batch[float32]) error { return nil })
	require.ErrorIs(t, err, errProduce)
	st, err := pf.Run(ctx, func(i int, host []float32) (int, error) { return len(host), nil },
		func(b *Batch[float32]) error {
			if b.Index == 2 {
				return errConsume
			}
			return nil
		})
	require.ErrorIs(t, err, errConsume)
	require.Equal(t, 3, st.Batches)
	_, err = pf.Run(ctx, func(i int, host []float32) (int, error) { return len(host) + 1, nil },
		func(*Batch[float32]) error { return nil })
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "17 elements written in a buffer of 16")
	_, err = pf.Run(ctx, nil, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.NoError(t, pf.Close())
	require.NoError(t, pf.Close(), "a second Close does nothing")
	_, err = pf.Run(ctx, produceBatches(16), func(*Batch[float32]) error { return nil })
	require.ErrorContains(t, err, "closed")
}

// prefetchCancel: with the device's work held (the fake's gate), a Run
// that must wait for a copy to refill its buffer returns at its context's
// end; released, the next Run on the same prefetcher works.
func prefetchCancel(t *testing.T, d *Device) {
	pf, err := NewPrefetcher[float32](d, 2, pfBatch)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pf.Close()) })
	release := holdWork(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := 0
	done := make(chan error, 1)
	go func() {
		_, err := pf.Run(ctx, func(i int, host []float32) (int, error) {
			produced++
			if i == 1 {
				cancel() // batch 2 must wait for batch 0's copy, held
			}
			return len(host), nil
		}, func(*Batch[float32]) error { return nil })
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("Run did not return at its context's cancellation")
	}
	require.Equal(t, 2, produced, "no batch produced into a buffer whose copy is pending")
	release()
	st, err := pf.Run(context.Background(), produceBatches(3*pfBatch), func(b *Batch[float32]) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 3, st.Batches)
}

// deviceSynchronize: Device.Synchronize waits for every queue of the
// device, and gives up at its context's end, leaving the queues usable.
func deviceSynchronize(t *testing.T, d *Device) {
	qs := make([]*Queue, 2)
	arrs := make([]Array[byte], 2)
	src := make([]byte, 1<<16)
	for i := range qs {
		var err error
		qs[i], err = d.NewQueue()
		require.NoError(t, err)
		arrs[i], err = AllocArray[byte](d, MemDevice, len(src))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for i := range qs {
			require.NoError(t, qs[i].Close())
			require.NoError(t, arrs[i].Free())
		}
	})
	release := holdWork(t, d)
	for i := range qs {
		require.NoError(t, CopyToDevice(arrs[i], src, qs[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, d.Synchronize(ctx), context.DeadlineExceeded)
	release()
	require.NoError(t, d.Synchronize(context.Background()))
	for _, q := range qs {
		done, err := q.Query()
		require.NoError(t, err)
		require.True(t, done, "every queue's work completed")
	}
	require.ErrorIs(t, d.Synchronize(nil), ErrInvalidArgument) //nolint:staticcheck // the nil context is the point
}
