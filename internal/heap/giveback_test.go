package heap

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// Issue 29, item 7: a Free that let a chunk go waited for the chunk's
// grace period, a stop-the-world, which waits for every P: 34-180 ms on a
// loaded machine. It now hands the release to a goroutine. Here another
// goroutine stays pinned to its P (as a thread the OS has not scheduled
// holds a stop-the-world off) until the Free returns: the Free must return
// first, and the chunk goes back once the pin ends. (The spin gives up
// after a minute so that the old behaviour fails instead of hanging; that
// bound is no timing assertion. BenchmarkFreeReleasingChunkUnderLoad has
// the figures.)
func TestFreeDoesNotWaitForStopTheWorld(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps: one pinned, one freeing")
	}
	src := &budgetSource{budget: 64 << 10}
	h := New(src, Config{Name: "stw", KeepChunks: 0})
	p, _, err := h.Alloc(40000, 16, 0, false) // a chunk of its own, let go by its Free
	require.NoError(t, err)

	var pinned, freed, gaveUp atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		pcpu.Pin()
		pinned.Store(true)
		deadline := time.Now().Add(time.Minute)
		for i := 0; !freed.Load(); i++ {
			if i%(1<<20) == 0 && time.Now().After(deadline) {
				gaveUp.Store(true)
				break
			}
		}
		pcpu.Unpin()
	}()
	for !pinned.Load() {
		runtime.Gosched()
	}
	_, err = Free(p)
	freed.Store(true)
	require.NoError(t, err)
	<-done
	require.False(t, gaveUp.Load(), "the Free waited for the pinned goroutine: a stop-the-world on the caller's path")
	h.WaitReleases()
	require.Equal(t, 1, src.released, "the chunk went back once the pin ended")
	require.Zero(t, h.Stats().Chunks)
}
