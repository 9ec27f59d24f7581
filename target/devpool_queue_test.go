package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// Issue 27, items 2, 6 and 8, run by TestDriverPoolChild against each pool
// kind (the fake CUDA driver's stream-ordered pool, its size-class cache
// as an older driver, and the fake HSA runtime's), on 64 MiB devices.

const mib = 1 << 20

func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

// The misuse PyTorch's record_stream guards against: a block freed on q1
// while q2's copy still reads it, then an allocation on q1. q1 must not get
// the block back while q2 reads it, and q2 reads the first batch, not the
// next one. Seen failing before the fix on every pool kind: q1 got the same
// block at once.
func poolFreeWhileAnotherQueueReads(t *testing.T, d *Device) {
	const n = 1 << 16
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	q1, q2 := newQueue(t, d), newQueue(t, d)
	x, err := PoolArray[byte](d, n, q1)
	require.NoError(t, err)
	batch1, batch2 := filled(n, 1), filled(n, 2)
	require.NoError(t, CopyToDevice(x, batch1, q1))
	require.NoError(t, q1.Synchronize(context.Background()))

	release := holdWork(t, d)
	out := make([]byte, n)
	require.NoError(t, CopyFromDevice(out, x, q2)) // q2 reads x, held
	require.NoError(t, x.FreeOn(q1))
	y, err := PoolArray[byte](d, n, q1)
	require.NoError(t, err)
	require.NotEqual(t, x.m.Addr, y.m.Addr, "q1 got the block back while q2 still reads it")
	require.NoError(t, CopyToDevice(y, batch2, q1))
	release()
	require.NoError(t, q1.Synchronize(context.Background()))
	require.NoError(t, q2.Synchronize(context.Background()))
	require.True(t, bytes.Equal(batch1, out), "q2 read another batch than the one it was given")
	require.NoError(t, y.FreeOn(q1))
	require.NoError(t, q1.Synchronize(context.Background()))
	require.Zero(t, d.poolStats().InUse)
}

// Work ompalloc did not issue (a user's kernel on q2) is recorded with
// RecordUse: the block then waits for q2 as a copy of ompalloc's would.
func poolRecordUse(t *testing.T, d *Device) {
	const n = 1 << 16
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	q1, q2 := newQueue(t, d), newQueue(t, d)
	x, err := PoolArray[byte](d, n, q1)
	require.NoError(t, err)
	require.NoError(t, CopyToDevice(x, filled(n, 3), q1))
	require.NoError(t, q1.Synchronize(context.Background()))
	other, err := PoolArray[byte](d, n, q2)
	require.NoError(t, err)

	release := holdWork(t, d)
	require.NoError(t, CopyToDevice(other, filled(n, 4), q2)) // q2 busy, on other memory: the "kernel"
	require.NoError(t, q2.RecordUse(x.m.Addr+100), "anywhere inside the block")
	require.NoError(t, x.FreeOn(q1))
	y, err := PoolArray[byte](d, n, q1)
	require.NoError(t, err)
	require.NotEqual(t, x.m.Addr, y.m.Addr, "the block waits for the work recorded on q2")
	release()
	require.NoError(t, q2.Synchronize(context.Background()))
	require.NoError(t, y.FreeOn(q1))
	require.NoError(t, other.FreeOn(q2))
	require.NoError(t, q1.Synchronize(context.Background()))
	require.NoError(t, q2.Synchronize(context.Background()))

	host := make([]byte, 8)
	require.ErrorIs(t, q1.RecordUse(uintptr(unsafe.Pointer(&host[0]))), ErrInvalidArgument, "memory of no pool block")
	q3, err := d.NewQueue()
	require.NoError(t, err)
	require.NoError(t, q3.Close())
	require.ErrorIs(t, q3.RecordUse(y.m.Addr), ErrQueueClosed)
	var nilQ *Queue
	require.ErrorIs(t, nilQ.RecordUse(y.m.Addr), ErrInvalidArgument)
}

// Issue 27 item 6: on a 64 MiB device, 40 MiB allocated and freed, then 48
// MiB: the pool gives its free memory back and retries instead of failing
// with the driver's out-of-memory error. Also under the size-class cache's
// bound (7 MiB cached, then 60 MiB: only the retry helps). What nothing
// cached can make room for is an error matching ErrOutOfMemory.
// Seen failing before the fix with CUDA_ERROR_OUT_OF_MEMORY on both CUDA
// pool kinds and HSA_STATUS_ERROR_OUT_OF_RESOURCES on HSA.
func poolOutOfMemory(t *testing.T, d *Device) {
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	for _, c := range []struct{ first, second uintptr }{{40 * mib, 48 * mib}, {7 * mib, 60 * mib}} {
		x, err := d.PoolAlloc(c.first, nil)
		require.NoError(t, err)
		require.NoError(t, d.PoolFree(x, nil))
		y, err := d.PoolAlloc(c.second, nil)
		require.NoError(t, err, "%d MiB after %d MiB freed on a 64 MiB device: %+v", c.second>>20, c.first>>20, d.poolStats())
		require.NoError(t, d.PoolFree(y, nil))
	}
	_, err := d.PoolAlloc(80*mib, nil)
	require.ErrorIs(t, err, ErrOutOfMemory, "vendor-neutral")
	require.Zero(t, d.poolStats().InUse)
}

// gateHook closes or opens the fake's gate in front of an API call, and
// gated reports how many calls wait at closed gates.
func gateHook(t *testing.T, d *Device) (set func(name string, closed bool), gated func() int) {
	lib, fn, count := os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_gate", ""
	if d.Plugin() == "cuda" {
		lib, fn, count = os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_gate", "fakecuda_gated"
	}
	g := hook(t, lib, fn)
	set = func(name string, closed bool) {
		b := append([]byte(name), 0)
		c := uintptr(0)
		if closed {
			c = 1
		}
		dlcall.Call(g, uintptr(unsafe.Pointer(&b[0])), c)
		runtime.KeepAlive(b)
	}
	if count != "" {
		gc := hook(t, lib, count)
		gated = func() int { return int(int32(dlcall.Call(gc))) }
	}
	return set, gated
}

// Issue 27 item 8: a trim's cuMemFree (which synchronizes the device) runs
// outside the pool's mutex: while it waits, other allocations and frees of
// the device go on. Seen failing before the fix: PoolAlloc waited for the
// trim's cuMemFree (held at the fake's gate) until the test let it go.
func poolNoDriverCallUnderMutex(t *testing.T, d *Device) {
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	set, gated := gateHook(t, d)
	name := "cuMemFree"
	if d.poolStats().DriverPool || gated == nil {
		t.Skip("the size-class cache of the fake CUDA driver")
	}
	x, err := d.PoolAlloc(mib, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(x, nil))
	set(name, true)
	open := func() { set(name, false) }
	t.Cleanup(open)
	trimmed := make(chan uintptr, 1)
	g0 := gated()
	go func() { trimmed <- d.TrimPool(0) }()
	for gated() == g0 {
		runtime.Gosched()
	}
	returns(t, open, "PoolAlloc and PoolFree while a trim's cuMemFree waits", func() error {
		p, err := d.PoolAlloc(4096, nil)
		if err != nil {
			return err
		}
		return d.PoolFree(p, nil)
	})
	open()
	require.Equal(t, uintptr(mib), <-trimmed)
}

// The same for SetPoolLimit over the driver's pool: its cuMemPoolTrimTo runs
// outside the mutex. Seen failing before the fix.
func driverPoolLimitOutsideMutex(t *testing.T, d *Device) {
	set, gated := gateHook(t, d)
	const name = "cuMemPoolTrimTo"
	set(name, true)
	open := func() { set(name, false) }
	t.Cleanup(open)
	t.Cleanup(func() { d.SetPoolLimit(0) })
	done := make(chan struct{})
	g0 := gated()
	go func() { d.SetPoolLimit(32 * mib); close(done) }()
	for gated() == g0 {
		runtime.Gosched()
	}
	returns(t, open, "PoolAlloc and PoolFree while SetPoolLimit trims", func() error {
		p, err := d.PoolAlloc(4096, nil)
		if err != nil {
			return err
		}
		return d.PoolFree(p, nil)
	})
	open()
	<-done
	require.Equal(t, uintptr(32*mib), d.poolStats().Limit)
}

// Issue 27 item 8: a nil-queue allocation does not wait for another queue's
// long work (the driver would make the pool's stream wait for that queue's
// free when out of memory, REUSE_ALLOW_INTERNAL_DEPENDENCIES, and the
// allocation synchronizes that stream): it fails at once with the
// out-of-memory error instead. Seen failing before the fix: it blocked
// until the held work was let go.
func driverPoolNilAllocDoesNotWait(t *testing.T, d *Device) {
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	qa := newQueue(t, d)
	x, err := d.PoolAlloc(40*mib, qa)
	require.NoError(t, err)
	release := holdWork(t, d)
	require.NoError(t, CopyToDevice(deviceBytes(t, d, x, 4096), make([]byte, 4096), qa)) // held
	require.NoError(t, d.PoolFree(x, qa))
	returns(t, release, "a nil-queue PoolAlloc while a queue's free of the memory is pending", func() error {
		_, err := d.PoolAlloc(40*mib, nil)
		if !errors.Is(err, ErrOutOfMemory) {
			return fmt.Errorf("want an out-of-memory error, got %v", err)
		}
		return nil
	})
	release()
	require.NoError(t, qa.Synchronize(context.Background()))
	y, err := d.PoolAlloc(40*mib, nil)
	require.NoError(t, err, "the queue's free completed: the memory is back")
	require.NoError(t, d.PoolFree(y, nil))
}

// Issue 27 item 8: a nil-queue free while one queue is busy goes on that
// queue's stream, not on a stream shared with every other such free: that
// queue's later allocations may reuse the block at once, other queues only
// once its work is done, and no event is recorded. Seen failing before the
// fix: the free waited on the pool's shared free stream.
func driverPoolNilFreeOnTheBusyQueue(t *testing.T, d *Device) {
	const n = 1 << 16
	qa, qb := newQueue(t, d), newQueue(t, d)
	x, err := d.PoolAlloc(n, qa)
	require.NoError(t, err)
	release := holdWork(t, d)
	require.NoError(t, CopyToDevice(deviceBytes(t, d, x, n), make([]byte, n), qa)) // held: qa busy, qb idle
	require.NoError(t, d.PoolFree(x, nil))
	y, err := d.PoolAlloc(n, qa)
	require.NoError(t, err)
	require.Equal(t, x, y, "freed in qa's order: qa's later work may reuse it at once")
	require.NoError(t, d.PoolFree(y, qa))
	z, err := d.PoolAlloc(n, qb)
	require.NoError(t, err)
	require.NotEqual(t, x, z, "qb must wait for qa's work")
	require.NoError(t, d.PoolFree(z, qb))
	release()
	require.NoError(t, qa.Synchronize(context.Background()))
	require.NoError(t, qb.Synchronize(context.Background()))
}

// Issue 27 item 8: one failed cuMemPoolCreate does not keep the device on
// the size-class cache: the next miss asks again and gets the driver's
// pool; the cached block still frees and trims. Seen failing before the
// fix: DriverPool stayed false for the process's life.
func driverPoolCreateRetried(t *testing.T, d *Device) {
	t.Setenv("FAKECUDA_FAIL", "cuMemPoolCreate:1") // purego hands it on to the C environment
	p, err := d.PoolAlloc(mib, nil)
	require.NoError(t, err)
	require.False(t, d.poolStats().DriverPool, "the first cuMemPoolCreate failed: the cache serves")
	require.NoError(t, d.PoolFree(p, nil))
	q, err := d.PoolAlloc(2*mib, nil) // a miss: ask again
	require.NoError(t, err)
	st := d.poolStats()
	require.True(t, st.DriverPool, "%+v", st)
	require.NoError(t, d.PoolFree(q, nil))
	p2, err := d.PoolAlloc(mib, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(p2, nil))
	require.Equal(t, 1, d.poolStats().FreeBlocks, "the cache's block stays cached, the driver's pool serves")
	d.TrimPool(0)
	require.Zero(t, d.poolStats().Reserved)
}
