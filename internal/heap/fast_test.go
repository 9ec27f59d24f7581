package heap

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFastClassTable: the table Fast looks classes up in gives classFor's
// class and its slot size for every size up to Fast's limit, at every
// alignment a small block can have; past the limit no class holds.
func TestFastClassTable(t *testing.T) {
	for align := uintptr(minAlign); align <= maxSmall/2; align *= 2 {
		var f Fast
		var closed atomic.Bool
		f.Init(&Heap{}, NewTally(), 1, align, &closed)
		require.NotZero(t, f.limit, "align %d", align)
		off := offFor(align)
		for size := uintptr(1); size <= maxSmall; size++ {
			c := classFor(size+off, align)
			if size > f.limit {
				require.Negative(t, c, "align %d size %d: past the limit, yet class %d", align, size, c)
				continue
			}
			e := f.classes[((size+off+minAlign-1)>>4)&(classTableLen-1)]
			require.Equal(t, c, int(e&0xffff), "align %d size %d", align, size)
			require.Equal(t, classSize[c], uintptr(e>>16), "align %d size %d", align, size)
		}
	}
}

// TestFastAllocDeclines: Fast serves no size 0 or large size (Serves), and
// Alloc does nothing and returns 0 for what it leaves to the general path
// (the closed flag set, nothing cached yet); it serves and counts a cached
// block.
func TestFastAllocDeclines(t *testing.T) {
	h := newTestHeap(t)
	const owner = 4243
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })
	var closed atomic.Bool
	var f Fast
	f.Init(h, tl, owner, 16, &closed)

	require.False(t, f.Serves(0), "size 0")
	require.False(t, f.Serves(maxSmall), "a large size")
	require.True(t, f.Serves(f.limit))
	require.Zero(t, f.Alloc(64), "nothing cached yet")
	require.Zero(t, tl.Sum().Allocs)

	// A refill caches slots of the class on this P (most of the time: the
	// goroutine may move; then the general path serves again).
	var p uintptr
	for range 100 {
		q, _, err := h.AllocCounted(64, 16, owner, false, tl)
		require.NoError(t, err)
		_, err = Free(q)
		require.NoError(t, err)
		if p = f.Alloc(64); p != 0 {
			break
		}
	}
	require.NotZero(t, p, "a cached slot is served")
	b, err := Inspect(p)
	require.NoError(t, err)
	require.Equal(t, Block{Heap: h, Owner: owner, Size: 64, Footprint: 80}, b)
	require.Equal(t, uint64(1), tl.Sum().Allocs-tl.Sum().Frees)
	require.NoError(t, FreeFast(p, true))
	require.Zero(t, tl.Sum().Bytes)
	require.Equal(t, ErrDoubleFree, unwrapAll(FreeFast(p, true)), "a sequential double free")

	closed.Store(true)
	for range 10 {
		require.Zero(t, f.Alloc(64), "closed")
	}
	var none Fast
	require.False(t, none.Serves(64), "the zero Fast serves nothing")
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
