package target

import (
	"context"
	"github.com/ompalloc/ompalloc/internal/device"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A copy on the one-step pinned path reads its host memory late: while it
// is in flight, FreeAfterUse defers a free of any overlapping range until a
// Synchronize or Query finds the copy done, and lets a free of other memory
// go at once.
func TestFreeAfterUse(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 8192
	h := hostMem(t, n)
	_, err := d.LockMem(h, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.UnlockMem(h)) }()
	dev, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(MemDevice, dev)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)

	require.False(t, device.HostInUse())
	f.holdWork()
	require.NoError(t, d.submit(dev, h+100, 1000, q), "pinned path, in flight")
	require.True(t, device.HostInUse())
	var freed atomic.Int32
	require.False(t, device.FreeAfterUse(h+2000, 100, func() { freed.Add(100) }), "no copy uses it: free now")
	other := hostMem(t, n)
	require.False(t, device.FreeAfterUse(other, n, func() { freed.Add(100) }), "not in a registry: no pinned copy can use it")
	require.True(t, device.FreeAfterUse(h, 200, func() { freed.Add(1) }), "overlaps the copy's source")
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done)
	require.Zero(t, freed.Load(), "not while the copy is in flight")
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	require.Equal(t, int32(1), freed.Load(), "once, after the copy")
	require.False(t, device.HostInUse())
	require.False(t, device.FreeAfterUse(h, n, func() { freed.Add(100) }))

	// Retrieve into pinned memory is tracked too, and Close releases.
	f.holdWork()
	require.NoError(t, d.retrieve(h, dev, n, q))
	require.True(t, device.FreeAfterUse(h+n-1, 1, func() { freed.Add(1) }))
	f.release()
	require.NoError(t, q.Close())
	require.Equal(t, int32(2), freed.Load())
	require.False(t, device.HostInUse())
}

// Queue.OnDone runs its function once the work issued before it is done,
// from the Query or Synchronize that finds it so, or at once when the queue
// is idle; it refuses a nil function and a closed queue.
func TestQueueOnDone(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 4096
	dev, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(MemDevice, dev)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)

	var ran atomic.Int32
	require.NoError(t, q.OnDone(func() { ran.Add(1) }))
	require.Equal(t, int32(1), ran.Load(), "an idle queue frees at once")

	f.holdWork()
	require.NoError(t, d.exchange(dev, dev+n/2, n/2, q))
	require.NoError(t, q.OnDone(func() { ran.Add(1) }))
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, int32(1), ran.Load())
	f.release()
	waitIdle(t, q)
	require.Equal(t, int32(2), ran.Load(), "the Query that found the queue done ran it")

	require.ErrorIs(t, q.OnDone(nil), ErrInvalidArgument)
	require.NoError(t, q.Close())
	require.ErrorIs(t, q.OnDone(func() { ran.Add(1) }), ErrQueueClosed)
	require.Equal(t, int32(2), ran.Load())
}

// A function still waiting on a queue when Shutdown destroys it (here its
// Synchronize failed) runs after Shutdown let go of its locks: a deferred
// free may give a pinned chunk back through a device, which takes them.
func TestFreeAfterRunsOutsideShutdownLocks(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 4096
	dev, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	q, err := d.NewQueue()
	require.NoError(t, err)
	f.holdWork()
	require.NoError(t, d.exchange(dev, dev+n/2, n/2, q))
	var ran atomic.Int32
	require.NoError(t, q.OnDone(func() {
		_ = NumDevices() // takes the world's lock, as a chunk's unlock does
		ran.Add(1)
	}))
	f.failSync.Store(true)
	f.release()
	done := make(chan error, 1)
	go func() { done <- Shutdown() }()
	select {
	case err := <-done:
		// The failed wait is reported (issue 27 item 3); what the queue
		// held is released once the device is closed.
		require.ErrorIs(t, err, errInjected)
		require.ErrorIs(t, err, ErrWorkPending)
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown deadlocked running a deferred free under its locks")
	}
	f.failSync.Store(false)
	require.Equal(t, int32(1), ran.Load())
}

// An OnDone whose immediate query fails has still taken the function: it
// returns nil (an error would tell the caller to free the block itself, and
// the queue would free it a second time, perhaps under a new owner) and the
// function runs once, at the Synchronize that finds the work done.
func TestQueueOnDoneQueryFails(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 4096
	dev, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(MemDevice, dev)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()

	var ran atomic.Int32
	f.holdWork()
	defer f.release() // before the Close above waits for the work
	require.NoError(t, d.exchange(dev, dev+n/2, n/2, q))
	f.failQuery.Store(true)
	t.Cleanup(func() { f.failQuery.Store(false) })
	require.NoError(t, q.OnDone(func() { ran.Add(1) }), "taken: the failed query is no error of OnDone's")
	require.Zero(t, ran.Load())
	f.failQuery.Store(false)
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	require.Equal(t, int32(1), ran.Load(), "run once, by the Synchronize")

	// Idle queue, failing query: still taken, run by the next Synchronize.
	f.failQuery.Store(true)
	require.NoError(t, q.OnDone(func() { ran.Add(1) }))
	f.failQuery.Store(false)
	require.NoError(t, q.Synchronize(context.Background()))
	require.Equal(t, int32(2), ran.Load())
}

// Memory one device pinned is pinned for every device of its plugin (CUDA
// registers PORTABLE, HSA locks for every agent), so a queued copy on
// another device of that plugin reads or writes it late too: that copy is
// a use of the memory, and a free of it waits for the copy, though the
// copying device's registry does not know the memory.
func TestFreeAfterUseAcrossDevices(t *testing.T) {
	f0, f1 := newFake("fake0", 0), newFake("fake1", 0)
	withPlugins(t, &fakePlugin{name: "fake", impls: []plugin.Impl{f0, f1}})
	t.Cleanup(f0.release)
	t.Cleanup(f1.release)
	d0, err := Get(0)
	require.NoError(t, err)
	d1, err := Get(1)
	require.NoError(t, err)
	const n = 1 << 20 // above the staging threshold: Submit copies from it directly
	h := hostMem(t, n)
	_, err = d0.LockMem(h, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d0.UnlockMem(h)) }()
	dev, err := d1.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d1.Free(MemDevice, dev)) }()
	q, err := d1.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()

	for _, tc := range []struct {
		name string
		copy func() error
	}{
		{"retrieve into it", func() error { return d1.retrieve(h, dev, n, q) }},
		{"submit from it", func() error { return d1.submit(dev, h, n, q) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var freed atomic.Int32
			f1.holdWork()
			defer f1.release()
			require.NoError(t, tc.copy())
			require.True(t, device.HostInUse(), "the copy on device 1 uses memory device 0 pinned")
			require.True(t, device.FreeAfterUse(h+n/2, 64, func() { freed.Add(1) }), "a free of it waits for the copy")
			require.Zero(t, freed.Load())
			f1.release()
			require.NoError(t, q.Synchronize(context.Background()))
			require.Equal(t, int32(1), freed.Load())
			require.False(t, device.HostInUse())
		})
	}

	// Memory no registry knows is no use: the free goes at once.
	other := hostMem(t, n)
	f1.holdWork()
	require.NoError(t, d1.retrieve(other, dev, n, q))
	require.False(t, device.HostInUse())
	f1.release()
	require.NoError(t, q.Synchronize(context.Background()))
}
