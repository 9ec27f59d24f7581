package heap

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

func TestTallyEnterExit(t *testing.T) {
	tl := NewTally()
	var closed atomic.Bool
	require.True(t, tl.Enter(&closed))
	require.True(t, tl.Enter(&closed))
	require.EqualValues(t, 2, tl.InFlight())
	done := make(chan struct{})
	go func() { tl.Exit(); close(done) }() // may end on another P
	<-done
	require.EqualValues(t, 1, tl.InFlight())
	closed.Store(true)
	require.False(t, tl.Enter(&closed), "Enter after close")
	require.EqualValues(t, 1, tl.InFlight(), "a refused Enter takes its count back")
	tl.Exit()
	require.EqualValues(t, 0, tl.InFlight())
	require.Zero(t, tl.Sum().Live(), "in-flight counts are not blocks")
}

// Once the closer has set the flag and read a zero sum, no operation that
// Enter let in is still running, however the goroutines migrate.
func TestTallyCloseWaitsForInFlight(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for r := 0; r < rounds; r++ {
		tl := NewTally()
		var closed atomic.Bool
		var inside atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; tl.Enter(&closed); i++ {
					inside.Add(1)
					if i%3 == 0 {
						runtime.Gosched() // migrate between Enter and Exit
					}
					inside.Add(-1)
					tl.Exit()
				}
			}()
		}
		runtime.Gosched()
		closed.Store(true)
		for tl.InFlight() != 0 {
			runtime.Gosched()
		}
		require.Zero(t, inside.Load(), "round %d: an operation still runs after the wait", r)
		wg.Wait()
		require.Zero(t, tl.InFlight())
	}
}

func TestAllocGuarded(t *testing.T) {
	if !pcpu.HasBarrier {
		t.Skip("AllocGuarded needs membarrier (Linux, not a race build); the general path is tested elsewhere")
	}
	tests := []struct {
		name      string
		size      uintptr
		foot      uintptr // the footprint served
		notCached uintptr // a size of the same kind that nothing cached fits
	}{
		{"small slot", 64, classSize[classFor(64+hdrSize, 16)], 96},
		{"medium span", 1 << 20, 1<<20 + descSize, 512 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHeap(t)
			tl := NewTally()
			SetTally(7, tl)
			t.Cleanup(func() { SetTally(7, nil) })
			var closed atomic.Bool

			// Warm the cache: a freed block stays in this P's cache (the
			// test goroutine may move between Ps, so retry until a pop is
			// served).
			served := false
			for i := 0; i < 100 && !served; i++ {
				p, _, err := h.AllocCounted(tc.size, 16, 7, false, tl)
				require.NoError(t, err)
				_, err = Free(p)
				require.NoError(t, err)
				q, foot, ok, refused := h.AllocGuarded(tc.size, 16, 7, false, tl, &closed)
				require.False(t, refused)
				if ok {
					served = true
					require.Equal(t, p, q, "the block just freed is served again")
					require.Equal(t, tc.foot, foot)
					b, err := Inspect(q)
					require.NoError(t, err)
					require.Equal(t, tc.size, b.Size)
					require.EqualValues(t, 7, b.Owner)
					sum := tl.Sum()
					require.EqualValues(t, 1, sum.Live(), "counted in the tally")
					require.Equal(t, int64(tc.size), sum.Bytes)
					require.Equal(t, int64(tc.foot), sum.Foot)
					_, err = Free(q)
					require.NoError(t, err)
					_, err = Free(q)
					require.ErrorIs(t, err, ErrDoubleFree, "a guarded block frees once")
				}
			}
			require.True(t, served, "a block freed just before is served from the P's cache")
			before := tl.Sum()
			require.EqualValues(t, 0, before.Live())

			// Huge or not cached: nothing done, nothing counted.
			for _, size := range []uintptr{tc.notCached, 4 << 20} {
				_, _, ok, refused := h.AllocGuarded(size, 16, 7, false, tl, &closed)
				require.False(t, ok || refused, "%d bytes", size)
				require.Equal(t, before, tl.Sum())
			}

			// Closed: refused, and neither the tally nor the in-flight
			// count keeps a trace (Destroy must read no block live and
			// nothing in flight).
			closed.Store(true)
			refused := false
			for i := 0; i < 10 && !refused; i++ {
				var ok bool
				_, _, ok, refused = h.AllocGuarded(tc.size, 16, 7, false, tl, &closed)
				require.False(t, ok)
			}
			require.True(t, refused, "closed set: the cached block is refused")
			require.Equal(t, before, tl.Sum(), "a refused allocation counts nothing")
			require.Zero(t, tl.InFlight())
		})
	}
}

// Once the closer has set the flag and waited for InFlight to read zero,
// no allocation can count a block any more, whether it took the guarded
// path or the general one: the tally's allocation count is final.
func TestAllocGuardedCloseIsFinal(t *testing.T) {
	if !pcpu.HasBarrier {
		t.Skip("AllocGuarded needs membarrier (Linux, not a race build)")
	}
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	h := newTestHeap(t)
	t.Cleanup(func() { SetTally(8, nil) })
	for r := 0; r < rounds; r++ {
		tl := NewTally()
		SetTally(8, tl)
		var closed atomic.Bool
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var held []uintptr
				defer func() {
					for _, p := range held {
						_, _ = Free(p)
					}
				}()
				for i := 0; ; i++ {
					size := uintptr(64)
					if i%4 == 1 {
						size = 1 << 20 // a medium block: a cached span
					}
					p, _, ok, refused := h.AllocGuarded(size, 16, 8, false, tl, &closed)
					if refused {
						return
					}
					if !ok {
						if !tl.Enter(&closed) {
							return
						}
						var err error
						p, _, err = h.AllocCounted(size, 16, 8, false, tl)
						tl.Exit()
						if err != nil {
							t.Error(err)
							return
						}
					}
					if held = append(held, p); len(held) > 8 || i%3 == 0 {
						_, _ = Free(held[0])
						held = held[1:]
					}
					if i%5 == 0 {
						runtime.Gosched()
					}
				}
			}()
		}
		runtime.Gosched()
		closed.Store(true)
		for tl.InFlight() != 0 {
			runtime.Gosched()
		}
		allocs := tl.Sum().Allocs
		wg.Wait()
		st := tl.Sum()
		require.Equal(t, allocs, st.Allocs, "round %d: a block was counted after the closer's wait", r)
		require.Zero(t, st.Live(), "round %d", r)
	}
}
