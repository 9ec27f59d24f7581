package target

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Freeing a staging buffer is a device-synchronizing driver call
// (cuMemFreeHost waits for the device's work in flight), so the staging
// pool makes it without its lock: a submission that takes a cached buffer
// from the pool does not wait for it (issue 19, item 7).
func TestStagingFreeOutsidePoolLock(t *testing.T) {
	f, d := withFake(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	dst, err := d.Alloc(MemDevice, 64<<10)
	require.NoError(t, err)
	src := hostMem(t, 64<<10)
	// One buffer of 256 bytes and one of 64 KiB, back in the pool.
	require.NoError(t, d.submit(dst, src, 100, q))
	require.NoError(t, d.submit(dst, src, 60<<10, q))
	require.NoError(t, q.Synchronize(context.Background()))
	s := d.StagingStats()
	require.Equal(t, uintptr(256+64<<10), s.PoolBytes)

	gate := make(chan struct{})
	f.freeGate.Store(&gate)
	opened := false
	open := func() {
		if !opened {
			opened = true
			f.freeGate.Store(nil)
			close(gate)
		}
	}
	t.Cleanup(open)
	cfg := d.StagingConfig()
	t.Cleanup(func() { d.SetStagingConfig(cfg) })
	lowered := make(chan struct{})
	go func() {
		// The 64 KiB buffer no longer fits: freed, and held at the gate.
		d.SetStagingConfig(StagingConfig{Threshold: 1024, MaxPoolBytes: cfg.MaxPoolBytes})
		close(lowered)
	}()
	for deadline := time.Now().Add(10 * time.Second); f.freeWaiting.Load() == 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the pool never freed the buffer")
	}
	done := make(chan error, 1)
	go func() { done <- d.submit(dst, src, 100, q) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		open()
		<-lowered
		t.Fatal("a submission taking a cached staging buffer waited for another buffer's free")
	}
	require.Equal(t, uint64(1), d.StagingStats().Hits-s.Hits, "the cached buffer served it")
	open()
	<-lowered
	require.NoError(t, q.Synchronize(context.Background()))
	require.Equal(t, uintptr(256), d.StagingStats().PoolBytes)
}
