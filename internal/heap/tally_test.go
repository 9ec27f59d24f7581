package heap

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClassDivMul checks the multiply that replaces Free's divide against
// the divide, at every slot boundary of a span of every class (both sides
// are monotone in the offset, so agreeing on both sides of every boundary
// means agreeing everywhere), up to the span's end.
func TestClassDivMul(t *testing.T) {
	for c := range numClasses {
		s, m := uint64(classSize[c]), classDivMul[c]
		end := uint64(classPages[c] * pageSize)
		for o := uint64(0); o <= end; o += s {
			require.Equal(t, o/s, o*m>>divShift, "class %d offset %d", s, o)
			if o > 0 {
				require.Equal(t, (o-1)/s, (o-1)*m>>divShift, "class %d offset %d", s, o-1)
			}
		}
	}
}

// TestTallyCounts: the owner's tally counts every Alloc and Free exactly,
// small and large, through the cached path and the central one, and from
// several goroutines at once.
func TestTallyCounts(t *testing.T) {
	h := newTestHeap(t)
	const owner = 4242
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })

	var want TallySum
	var ps []uintptr
	for _, size := range []uintptr{1, 64, 100, 4000, 30 << 10, 100 << 10, 3 << 20} {
		for range 300 { // more than a cache holds: refills and spills too
			p, foot, err := h.AllocCounted(size, 16, owner, false, tl)
			require.NoError(t, err)
			ps = append(ps, p)
			want.Allocs++
			want.Bytes += int64(size)
			want.Foot += int64(foot)
		}
	}
	require.Equal(t, want, tl.Sum())
	require.GreaterOrEqual(t, tl.Peak(), want.Bytes-PeakStep*int64(runtime.GOMAXPROCS(0)))
	for _, p := range ps[:len(ps)/2] {
		b, err := Free(p)
		require.NoError(t, err)
		want.Frees++
		want.Bytes -= int64(b.Size)
		want.Foot -= int64(b.Footprint)
	}
	require.Equal(t, want, tl.Sum())
	var wg sync.WaitGroup
	rest := ps[len(ps)/2:]
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(rest); i += 4 {
				_, err := Free(rest[i])
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	st := tl.Sum()
	require.Zero(t, st.Live())
	require.Zero(t, st.Bytes)
	require.Zero(t, st.Foot)

	// A failed free counts nothing.
	_, err := Free(ps[0])
	require.ErrorIs(t, err, ErrDoubleFree)
	require.Equal(t, st, tl.Sum())
}

// TestTallyGrow: counts made before GOMAXPROCS grows stay counted after.
func TestTallyGrow(t *testing.T) {
	tl := NewTally()
	tl.CountAlloc(10, 16)
	old := runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 2)
	defer runtime.GOMAXPROCS(old)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				tl.CountAlloc(1, 16)
				tl.CountFree(1, 16)
			}
			tl.Fallback()
		}()
	}
	wg.Wait()
	require.Equal(t, TallySum{Allocs: 8001, Frees: 8000, Bytes: 10, Foot: 16, Fallbacks: 8}, tl.Sum())
}
