package heap

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// TestAllocSampledCountdown: the hot path's countdown, kept in the tally
// shard, samples at the rate (64 MiB of 64 B blocks at 64 KiB is 1024
// samples on average, Poisson sd 32; every block at rate 1; none off), and
// a new rate holds from the next allocation: a countdown drawn under a
// rate of 1 TiB is redrawn, not run out first (SetRate bumps the gen).
// SampleHook gets the blocks the countdown takes (counted) and, while
// profiling is on, those the hot path did not count down (a huge block).
func TestAllocSampledCountdown(t *testing.T) {
	h := newTestHeap(t)
	const owner = 4243
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })
	old := memsample.Rate()
	t.Cleanup(func() { memsample.SetRate(old) })

	// hits counts the blocks sampled, as alloc's hook decides: the
	// countdown's, or, for a block it did not count down (a refill, when
	// the goroutine moved to a P whose cache was empty), memsample's Tick.
	// asked counts the latter.
	var hits, asked int
	oldHook := SampleHook
	t.Cleanup(func() { SampleHook = oldHook })
	SampleHook = func(p, size uintptr, o uint32, counted bool) {
		require.Equal(t, uint32(owner), o)
		if !counted {
			asked++
			if !memsample.Tick(size) {
				return
			}
		}
		hits++
	}
	sampled := func(n int, size uintptr) int {
		hits = 0
		for range n {
			p, _, err := h.AllocSampled(size, 16, owner, false, tl)
			require.NoError(t, err)
			_, err = Free(p)
			require.NoError(t, err)
		}
		return hits
	}
	sampled(1, 64) // a cached slot from here on
	asked = 0

	memsample.SetRate(0)
	require.Zero(t, sampled(1000, 64))
	require.Zero(t, asked, "off, the hook is not called")

	memsample.SetRate(64 << 10)
	const n = (64 << 20) / 64
	require.InDelta(t, 1024, sampled(n, 64), 200)
	require.Less(t, asked, n/100, "the hot path counts down nearly every block")

	memsample.SetRate(1 << 40)
	require.Zero(t, sampled(1000, 64))
	memsample.SetRate(1)
	require.Equal(t, 1000, sampled(1000, 64))

	// AllocGuarded (a runtime allocator's path) samples the same way.
	if pcpu.HasBarrier {
		var closed atomic.Bool
		guarded := 0
		for range 100 {
			p, _, ok, _ := h.AllocGuarded(64, 16, owner, false, tl, &closed)
			if ok {
				guarded++
				_, err := Free(p)
				require.NoError(t, err)
			}
		}
		hits0 := hits
		require.NotZero(t, guarded)
		hits = 0
		for range guarded {
			p, _, ok, _ := h.AllocGuarded(64, 16, owner, false, tl, &closed)
			require.True(t, ok, "cached after the loop above")
			_, err := Free(p)
			require.NoError(t, err)
		}
		require.Equal(t, guarded, hits, "every block at rate 1")
		hits = hits0
	}

	// A huge block is not served by the hot path: the hook asks memsample.
	asked = 0
	require.Equal(t, 1, sampled(1, 3<<20))
	require.Equal(t, 1, asked)
	memsample.SetRate(0)
	require.Zero(t, sampled(1, 3<<20))
}
