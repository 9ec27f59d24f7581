package heap

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestFastClassTable: the table Fast looks classes up in gives classFor's
// class and its slot size for every size up to Fast's limit, at every
// alignment a small block can have; past the limit no class holds.
func TestFastClassTable(t *testing.T) {
	for align := uintptr(minAlign); align <= maxSmall/2; align *= 2 {
		var f Fast
		f.Init(&Heap{}, NewTally(), 1, align)
		require.NotZero(t, f.max, "align %d", align)
		require.Equal(t, f.max, f.limit.Load(), "align %d: not gated", align)
		off := offFor(align)
		for size := uintptr(1); size <= maxSmall; size++ {
			c := classFor(size+off, align)
			if size > f.max {
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
	require.True(t, e.Fast.Serves(e.Fast.max))
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

	// Cached again (the free above), yet refused while gated (the leak
	// check), served once the gate is lifted, and refused once closed
	// (destroyed), with the entry handed on each time.
	e.Fast.Gate(true)
	require.False(t, e.Fast.Serves(64), "gated")
	for range 10 {
		slowCalls, slowGot = 0, nil
		require.Zero(t, alloc(handle, 64), "gated")
		require.Equal(t, 1, slowCalls)
		require.Same(t, e, slowGot)
	}
	require.Zero(t, tl.Sum().Allocs-tl.Sum().Frees, "gated: nothing counted")
	e.Fast.Gate(false)
	require.True(t, e.Fast.Serves(64), "the gate lifted")
	for range 100 {
		slowCalls = 0
		if p = alloc(handle, 64); p != 0 {
			break
		}
		q, _, err := h.AllocCounted(64, 16, owner, false, tl) // the goroutine moved: cache one here
		require.NoError(t, err)
		_, err = Free(q)
		require.NoError(t, err)
	}
	require.NotZero(t, p, "served again once the gate is lifted")
	require.NoError(t, FreeFast(p, true, nil))
	e.Destroyed.Store(true)
	e.Fast.Close()
	for range 10 {
		slowCalls, slowGot = 0, nil
		require.Zero(t, alloc(handle, 64), "destroyed")
		require.Equal(t, 1, slowCalls)
		require.Same(t, e, slowGot, "destroyed: the entry handed on (slow checks the flag)")
	}
	require.Zero(t, tl.Sum().Allocs-tl.Sum().Frees, "closed: nothing counted")
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

// TestHeaderWord: the one-word header AllocEntry stores (headerWord with
// the size at sizeShift) is, byte for byte, the header handOut writes, for
// every offset an alignment gives and owners and sizes at their limits.
func TestHeaderWord(t *testing.T) {
	var buf [2 * maxSmall]uint64 // 8-aligned, as a slot is
	base := uintptr(unsafe.Pointer(&buf[0]))
	for align := uintptr(minAlign); align <= maxSmall/2; align *= 2 {
		off := offFor(align)
		for _, owner := range []uint32{0, 1, 4243, maxOwner} {
			for _, size := range []uintptr{1, 64, 1 << 15, 1<<16 - 1} {
				clear(buf[:])
				p := (&Heap{}).handOut(base, off, size, owner)
				got := *(*uint64)(unsafe.Add(unsafe.Pointer(&buf[0]), p-hdrSize-base))
				require.Equal(t, got, headerWord(owner, off)|uint64(size)<<sizeShift,
					"align %d owner %d size %d", align, owner, size)
			}
		}
	}
}

// TestFreeFastClaimsOnlyLiveBlocks: FreeFast reads the owner and the P's
// lists before its compare-and-swap claims the block, and claims with the
// tag it read; what it refuses must still be refused, with nothing counted
// and the block untouched: each of four racing frees of one block but one
// is a double free, counted once; an interior or misaligned pointer is
// refused and the block stays live; a block whose owner has no tally takes
// the swap's other path and is still freed once.
func TestFreeFastClaimsOnlyLiveBlocks(t *testing.T) {
	h := newTestHeap(t)
	const owner, orphan = 4244, 4245 // orphan: no tally registered
	tl := NewTally()
	SetTally(owner, tl)
	t.Cleanup(func() { SetTally(owner, nil) })
	alloc := func(o uint32) uintptr {
		p, _, err := h.AllocCounted(64, 16, o, false, map[uint32]*Tally{owner: tl}[o])
		require.NoError(t, err)
		return p
	}

	t.Run("racing frees", func(t *testing.T) {
		for range 200 {
			p := alloc(owner)
			before := tl.Sum()
			won, dup := racingFrees(p, 4)
			require.Equal(t, 1, won)
			require.Equal(t, 3, dup)
			after := tl.Sum()
			require.Equal(t, before.Frees+1, after.Frees, "counted out once")
			require.Equal(t, before.Bytes-64, after.Bytes)
		}
	})
	for _, tc := range []struct {
		name string
		off  uintptr
		want error
	}{
		{"interior", 16, ErrInvalid},
		{"misaligned", 8, ErrInvalid},
		{"inside the header", 4, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := alloc(owner)
			before := tl.Sum()
			require.ErrorIs(t, FreeFast(p+tc.off, false, nil), tc.want)
			require.Equal(t, before, tl.Sum(), "nothing counted")
			b, err := Inspect(p)
			require.NoError(t, err, "the block is still live")
			require.Equal(t, uintptr(64), b.Size)
			require.NoError(t, FreeFast(p, false, nil))
		})
	}
	t.Run("owner without a tally", func(t *testing.T) {
		p := alloc(orphan)
		require.NoError(t, FreeFast(p, false, nil))
		require.ErrorIs(t, FreeFast(p, false, nil), ErrDoubleFree)
		_, err := Inspect(p)
		require.Error(t, err, "freed")
	})
}

// racingFrees frees p with FreeFast from n goroutines at once and returns
// how many frees succeeded and how many were refused as double frees.
func racingFrees(p uintptr, n int) (won, dup int) {
	var w, d atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := FreeFast(p, false, nil); {
			case err == nil:
				w.Add(1)
			case errors.Is(err, ErrDoubleFree):
				d.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(w.Load()), int(d.Load())
}
