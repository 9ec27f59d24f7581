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
		f.Init(&Heap{}, NewTally(), 1, align)
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

// TestFastAllocDeclines: AllocEntry serves no size 0 or large size
// (Serves), and does nothing and calls the slow way for what it leaves to
// the general path (no entry, a stale handle, the destroyed flag set,
// nothing cached yet); it serves and counts a cached block.
func TestFastAllocDeclines(t *testing.T) {
	h := newTestHeap(t)
	const owner = 4243
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })
	const handle = 7<<16 | owner
	e := &Entry{Handle: handle}
	e.Fast.Init(h, tl, owner, 16)
	var slot atomic.Pointer[Entry]
	slowCalls := 0
	var slowGot *Entry
	slow := func(got *Entry, hd, size uintptr) uintptr {
		slowCalls++
		slowGot = got
		return 0
	}
	alloc := func(hd, size uintptr) uintptr { return AllocEntry(&slot, hd, size, slow) }

	require.False(t, e.Fast.Serves(0), "size 0")
	require.False(t, e.Fast.Serves(maxSmall), "a large size")
	require.True(t, e.Fast.Serves(e.Fast.limit))
	require.Zero(t, alloc(handle, 64), "no entry")
	require.Nil(t, slowGot, "no entry: none to hand on")
	slot.Store(e)
	require.Zero(t, alloc(handle+1<<16, 64), "a stale handle")
	require.Nil(t, slowGot, "a stale handle: not its entry")
	require.Zero(t, alloc(handle, 0), "size 0")
	require.Same(t, e, slowGot, "size 0: the entry handed on")
	require.Zero(t, alloc(handle, 64), "nothing cached yet")
	require.Same(t, e, slowGot)
	require.Equal(t, 4, slowCalls)
	require.Zero(t, tl.Sum().Allocs)

	// A refill caches slots of the class on this P (most of the time: the
	// goroutine may move; then the general path serves again).
	var p uintptr
	for range 100 {
		q, _, err := h.AllocCounted(64, 16, owner, false, tl)
		require.NoError(t, err)
		_, err = Free(q)
		require.NoError(t, err)
		slowCalls = 0
		if p = alloc(handle, 64); p != 0 {
			break
		}
	}
	require.NotZero(t, p, "a cached slot is served")
	require.Zero(t, slowCalls)
	b, err := Inspect(p)
	require.NoError(t, err)
	require.Equal(t, Block{Heap: h, Owner: owner, Size: 64, Footprint: 80}, b)
	require.Equal(t, uint64(1), tl.Sum().Allocs-tl.Sum().Frees)
	require.NoError(t, FreeFast(p, true, nil))
	require.Zero(t, tl.Sum().Bytes)
	require.Equal(t, ErrDoubleFree, unwrapAll(FreeFast(p, true, nil)), "a sequential double free")
	var reported error
	require.NoError(t, FreeFast(p, true, func(q uintptr, err error) {
		require.Equal(t, p, q)
		reported = err
	}), "an error goes to report")
	require.Equal(t, ErrDoubleFree, unwrapAll(reported), "a sequential double free, reported")
	require.NoError(t, FreeFast(0, true, nil), "nil")

	// Cached again (the free above), yet refused once destroyed.
	e.Destroyed.Store(true)
	for range 10 {
		slowCalls = 0
		require.Zero(t, alloc(handle, 64), "destroyed")
		require.Equal(t, 1, slowCalls)
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
