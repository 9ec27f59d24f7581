package heap

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/memsample"
)

// TestAllocSampledCountdown: the hot path's countdown, kept in the tally
// shard, samples at the rate (64 MiB of 64 B blocks at 64 KiB is 1024
// samples on average, Poisson sd 32; every block at rate 1; none off), and
// a new rate holds from the next allocation: a countdown drawn under a
// rate of 1 TiB is redrawn, not run out first (SetRate bumps the gen).
// Blocks the hot path did not count down say SampleAsk.
func TestAllocSampledCountdown(t *testing.T) {
	h := newTestHeap(t)
	const owner = 4243
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })
	old := memsample.Rate()
	t.Cleanup(func() { memsample.SetRate(old) })

	// sampled allocates and frees n blocks of size and returns how many
	// were sampled, as alloc decides: the countdown's SampleTake, or, for a
	// block it did not count down (SampleAsk: a refill, when the goroutine
	// moved to a P whose cache was empty), memsample's Tick. asked counts
	// the latter.
	var asked int
	sampled := func(n int, size uintptr) int {
		hits := 0
		for range n {
			p, _, smp, err := h.AllocSampled(size, 16, owner, false, tl)
			require.NoError(t, err)
			if smp == SampleAsk {
				asked++
			}
			if smp == SampleTake || smp == SampleAsk && memsample.On() && memsample.Tick(size) {
				hits++
			}
			_, err = Free(p)
			require.NoError(t, err)
		}
		return hits
	}
	sampled(1, 64) // a cached slot from here on
	asked = 0

	memsample.SetRate(0)
	require.Zero(t, sampled(1000, 64))

	memsample.SetRate(64 << 10)
	const n = (64 << 20) / 64
	require.InDelta(t, 1024, sampled(n, 64), 200)
	require.Less(t, asked, n/100, "the hot path counts down nearly every block")

	memsample.SetRate(1 << 40)
	require.Zero(t, sampled(1000, 64))
	memsample.SetRate(1)
	require.Equal(t, 1000, sampled(1000, 64))

	// A huge block is not served by the hot path: the caller asks memsample.
	p, _, smp, err := h.AllocSampled(3<<20, 16, owner, false, tl)
	require.NoError(t, err)
	require.Equal(t, SampleAsk, smp)
	_, err = Free(p)
	require.NoError(t, err)
}
