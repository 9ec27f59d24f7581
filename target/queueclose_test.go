package target

import (
	"context"
	"github.com/ompalloc/ompalloc/internal/device"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 27 item 3: Close after a failed synchronize released staging
// buffers, transfer locks and FreeAfter frees while the queue's work could
// still run (a failed wait says nothing about the work), and a second Close
// returned nil. Now the vendor queue is destroyed (it answers for its work
// afterwards) but what the work uses stays held, a free of memory a copy
// writes still waits for it, a second Close says so, and the Close that
// finds the work done releases everything.
func TestCloseAfterFailedSynchronize(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 4096
	h := hostMem(t, n)
	_, err := d.LockMem(h, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.UnlockMem(h)) })
	dev, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Free(MemDevice, dev)) })
	src := hostMem(t, 256)
	fill(src, 256, 3)
	q, err := d.NewQueue()
	require.NoError(t, err)

	inUse := d.StagingStats().InUseBytes
	f.holdWork()
	require.NoError(t, d.submit(dev, src, 256, q), "staged: small and pageable")
	require.Greater(t, d.StagingStats().InUseBytes, inUse, "a staging buffer in use")
	require.NoError(t, d.retrieve(h, dev, n, q), "the one-step pinned path: the copy writes h late")
	var ran, freed atomic.Int32
	require.NoError(t, q.OnDone(func() { ran.Add(1) }))

	f.failSync.Store(true)
	t.Cleanup(func() { f.failSync.Store(false) })
	err = q.Close()
	require.ErrorIs(t, err, errInjected)
	require.ErrorIs(t, err, ErrWorkPending)
	require.Zero(t, ran.Load(), "a deferred free does not run while the work may still run")
	require.Greater(t, d.StagingStats().InUseBytes, inUse, "the staging buffer stays with the work")
	require.True(t, device.FreeAfterUse(h, n, func() { freed.Add(1) }), "a free of memory the copy writes waits for it")
	require.Zero(t, freed.Load())
	err = q.Close()
	require.ErrorIs(t, err, ErrWorkPending, "a second Close does not pretend success")
	require.ErrorIs(t, q.Synchronize(context.Background()), ErrQueueClosed)

	f.failSync.Store(false)
	f.release()
	require.NoError(t, q.Close(), "the work is known done now")
	require.Equal(t, int32(1), ran.Load())
	require.Equal(t, int32(1), freed.Load())
	require.Equal(t, inUse, d.StagingStats().InUseBytes)
	require.False(t, device.HostInUse())
	require.NoError(t, q.Close(), "nothing left")
	d.qmu.Lock()
	_, open := d.queues[q]
	d.qmu.Unlock()
	require.False(t, open, "forgotten once released")
	require.True(t, hasFill(dev, 256, 3), "the staged copy ran, from its buffer")
}
