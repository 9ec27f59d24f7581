package memsample

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The number of samples is what the rate says: 64 MiB in 64 B
// allocations at 64 KiB is 1024 samples on average (Poisson: sd 32).
func TestTickRate(t *testing.T) {
	old := Rate()
	SetRate(64 << 10)
	t.Cleanup(func() { SetRate(old) })
	hits := 0
	for range (64 << 20) / 64 {
		if Tick(64) {
			hits++
		}
	}
	require.InDelta(t, 1024, hits, 200)
}

// Off, nothing is sampled; rate 1 samples everything.
func TestTickOffAndEvery(t *testing.T) {
	old := Rate()
	t.Cleanup(func() { SetRate(old) })
	SetRate(0)
	require.False(t, On())
	SetRate(1)
	for range 100 {
		require.True(t, Tick(1))
	}
}

// A sampled block is tracked until Forget; a block never sampled is not.
func TestRecordForget(t *testing.T) {
	p := uintptr(0x7f0000001230)
	before := live.Load()
	Record(p, 100, Labels{Allocator: "x"}, 0)
	require.True(t, Tracking())
	Forget(p + 16) // not a sampled block
	require.Equal(t, before+1, live.Load())
	Forget(p)
	require.Equal(t, before, live.Load())
	bs, _ := Snapshot()
	var found bool
	for _, b := range bs {
		if b.Labels.Allocator == "x" {
			found = true
			require.Equal(t, int64(1), b.Allocs)
			require.Equal(t, int64(1), b.Frees)
			require.Equal(t, int64(100), b.FreeBytes)
		}
	}
	require.True(t, found)
}

// Bias is what the heap's hot paths add to their peak compare: 0 while
// sampling is off (the compare is the peak's alone), and so negative while
// it is on that the compare holds at every allocation.
func TestBiasFollowsTheRate(t *testing.T) {
	old := Rate()
	t.Cleanup(func() { SetRate(old) })
	SetRate(0)
	require.Zero(t, Bias())
	SetRate(512 << 10)
	require.True(t, int64(-1<<50) > int64(1<<50)+Bias(), "any live bytes pass any mark")
	SetRate(0)
	require.Zero(t, Bias())
}
