package heap

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 23 item 7: a double free of a stale pointer racing Trim's release
// of the chunk it pointed into read the block's header from memory just
// unmapped: "fatal error: fault" in checkSmall. staleFreeHook holds the
// stale free in that window, after its compare-and-swap failed and before
// it reads the headers again, while Trim releases the chunk. Before the
// fix the process died here; now the release waits for the free.
func TestStaleFreeRacingChunkRelease(t *testing.T) {
	h := New(MapSource{}, Config{Name: t.Name()})
	t.Cleanup(h.Close)
	p, _, err := h.Alloc(1000, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
	require.Equal(t, 1, h.Stats().Chunks)

	var inWindow, released atomic.Bool
	staleFreeHook = func() {
		inWindow.Store(true)
		// Stay in the window until the chunk is released, or a while:
		// a fixed heap's release waits for this free to leave it.
		for end := time.Now().Add(300 * time.Millisecond); !released.Load() && time.Now().Before(end); {
		}
	}
	t.Cleanup(func() { staleFreeHook = nil })
	done := make(chan error)
	go func() {
		_, err := Free(p) // stale: already freed
		done <- err
	}()
	for !inWindow.Load() {
		runtime.Gosched()
	}
	staleFreeHook = nil
	h.Trim() // releases the chunk (nothing live in it)
	released.Store(true)
	require.ErrorIs(t, <-done, ErrDoubleFree)
	require.Zero(t, h.Stats().Chunks, "Trim released the chunk")
	_, err = Free(p)
	require.ErrorIs(t, err, ErrForeign, "the released chunk is no longer the heap's")
}

// The hammer: goroutines double-free and inspect stale pointers without
// pause while Trim releases the chunks they point into, for a bounded
// time. Every call must return an error (double free, invalid, or foreign
// once the chunk is gone), and nothing may fault.
func TestStaleFreeHammerWhileTrimming(t *testing.T) {
	d := 2 * time.Second
	if testing.Short() {
		d = 300 * time.Millisecond
	}
	h := New(MapSource{}, Config{Name: t.Name()})
	t.Cleanup(h.Close)
	var (
		mu     sync.RWMutex
		stale  []uintptr
		stop   atomic.Bool
		wg     sync.WaitGroup
		calls  atomic.Int64
		trims  int
		rounds int
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; !stop.Load(); i++ {
				// Held across the calls: the next round allocates (and may
				// reuse these addresses) only once no stale call runs.
				mu.RLock()
				if len(stale) == 0 {
					mu.RUnlock()
					runtime.Gosched()
					continue
				}
				p := stale[i%len(stale)]
				_, ferr := Free(p)
				_, ierr := Inspect(p)
				mu.RUnlock()
				if ferr == nil || ierr == nil {
					t.Errorf("a stale free (%v) or Inspect (%v) of %#x succeeded", ferr, ierr, p)
					return
				}
				calls.Add(2)
			}
		}(g)
	}
	for end := time.Now().Add(d); time.Now().Before(end); rounds++ {
		// 3,000 blocks of 1,000 bytes: a chunk of small spans, freed.
		ps := make([]uintptr, 3000)
		for i := range ps {
			p, _, err := h.Alloc(1000, 16, 1, false)
			require.NoError(t, err)
			ps[i] = p
		}
		for _, p := range ps {
			_, err := Free(p)
			require.NoError(t, err)
		}
		mu.Lock()
		stale = ps
		mu.Unlock()
		time.Sleep(time.Millisecond)
		h.Trim() // every chunk is empty: all released
		trims++
		time.Sleep(time.Millisecond) // stale frees of released chunks: foreign
		mu.Lock()
		stale = nil
		mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	require.Zero(t, h.Stats().Chunks)
	t.Logf("%d stale frees and inspections over %d trims", calls.Load(), trims)
}
