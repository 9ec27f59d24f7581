package alloc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

func TestFreeSliceChecksTheSlice(t *testing.T) {
	a := mustNew(t, memspace.Default)
	other := mustNew(t, memspace.Default)
	xs, err := Make[float64](a, 100)
	require.NoError(t, err)
	grown := append(xs, 1) // a copy on the Go heap

	for _, tc := range []struct {
		name string
		al   Interface
		s    []float64
		want error
		text string
	}{
		{"another allocator", other, xs, ErrInvalidArgument,
			"FreeSlice[float64]: invalid argument: the memory came from " + a.String() + ", not from " + other.String()},
		{"re-sliced from further in", a, xs[1:], ErrInvalidPointer,
			"FreeSlice[float64]: invalid pointer: the slice does not start where its block does (re-sliced from further in): free the slice Make returned"},
		{"grown by append", a, grown, ErrInvalidPointer,
			"FreeSlice[float64]: invalid pointer: the slice's memory never came from ompalloc (Go heap memory, such as the copy append makes"},
		{"Go memory", a, make([]float64, 4), ErrInvalidPointer, "FreeSlice[float64]: invalid pointer: the slice's memory never came from ompalloc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := FreeSlice(tc.al, tc.s)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.text)
			info, ierr := InspectSlice(xs)
			require.NoError(t, ierr, "nothing was freed")
			require.Equal(t, uintptr(800), info.Size)
		})
	}
	require.Equal(t, int64(1), a.Stats().BlocksLive)
	require.NoError(t, FreeSlice(a, xs[:0]), "a shorter re-slice from the start is the block")
	err = FreeSlice(a, xs)
	require.ErrorIs(t, err, ErrDoubleFree)
	require.EqualError(t, err, "FreeSlice[float64]: block already freed", "the operation, then the cause, once")
	require.NoError(t, FreeSlice[float64](a, nil))
}

func TestFreeSliceAcceptsTheFallbacksBlocks(t *testing.T) {
	a := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.DefaultMemFb))
	xs, err := Make[byte](a, 2<<20) // too big for the pool: default memory serves it
	require.NoError(t, err)
	info, err := InspectSlice(xs)
	require.NoError(t, err)
	require.Equal(t, handle(predef.DefaultMem), info.Allocator.handle())
	other := mustNew(t, memspace.Default, WithFallback(traits.NullFb))
	require.ErrorIs(t, FreeSlice(other, xs), ErrInvalidArgument, "not on other's chain")
	require.NoError(t, FreeSlice(a, xs))
}

func TestInspect(t *testing.T) {
	a := mustNew(t, memspace.Default, WithAlignment(64))
	p, err := a.Alloc(100)
	require.NoError(t, err)
	info, err := Inspect(p)
	require.NoError(t, err)
	require.Same(t, a, info.Allocator)
	require.Equal(t, uintptr(100), info.Size)
	require.GreaterOrEqual(t, info.Room, uintptr(100))
	require.False(t, target.IsPinned(unsafe.Slice((*byte)(p), 100)))

	_, err = Inspect(unsafe.Add(p, 16))
	require.ErrorIs(t, err, ErrInvalidPointer)
	var local int
	_, err = Inspect(unsafe.Pointer(&local))
	require.ErrorIs(t, err, ErrInvalidPointer)
	require.NoError(t, Free(p))
	_, err = Inspect(p)
	require.ErrorIs(t, err, ErrDoubleFree)
	_, err = InspectSlice([]int32{})
	require.ErrorIs(t, err, ErrInvalidArgument)

	// Target memory: no heap header, still described.
	th := mustNew(t, memspace.TargetHost)
	q, err := th.Alloc(4096)
	require.NoError(t, err)
	info, err = Inspect(q)
	require.NoError(t, err)
	require.Same(t, th, info.Allocator)
	require.Equal(t, uintptr(4096), info.Size)
	require.Zero(t, info.Room, "target memory never grows in place")
	require.NoError(t, Free(q))
}

func TestResize(t *testing.T) {
	a := mustNew(t, memspace.Default)
	xs, err := Make[int32](a, 11) // 44 bytes + the header: a 64-byte slot, room to grow
	require.NoError(t, err)
	for i := range xs {
		xs[i] = int32(i + 1)
	}
	info, err := InspectSlice(xs)
	require.NoError(t, err)
	inPlace := int(info.Room / 4)
	require.Greater(t, inPlace, 11)

	ys, err := Resize(a, xs, inPlace)
	require.NoError(t, err)
	require.Equal(t, addr(xs), addr(ys), "grown where it lies")
	require.Len(t, ys, inPlace)
	require.Equal(t, inPlace, cap(ys))
	require.Equal(t, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, ys[:11])
	require.Equal(t, make([]int32, inPlace-11), ys[11:])
	require.Equal(t, int64(inPlace*4), a.Stats().BytesLive)

	zs, err := Resize(a, ys, 100000) // no room: a new block
	require.NoError(t, err)
	require.NotEqual(t, addr(ys), addr(zs))
	require.Len(t, zs, 100000)
	require.Equal(t, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, zs[:11])
	require.Equal(t, make([]int32, 100000-11), zs[11:])
	st := a.Stats()
	require.Equal(t, int64(1), st.BlocksLive)
	require.Equal(t, int64(400000), st.BytesLive)

	small, err := Resize(a, zs, 3) // shrinking stays put
	require.NoError(t, err)
	require.Equal(t, addr(zs), addr(small))
	require.Equal(t, []int32{1, 2, 3}, small)
	require.Equal(t, int64(12), a.Stats().BytesLive)

	// Bad slices are refused and change nothing.
	other := mustNew(t, memspace.Default)
	_, err = Resize(other, small, 50)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = Resize(a, small[1:], 50)
	require.ErrorIs(t, err, ErrInvalidPointer)
	require.ErrorContains(t, err, "Resize[int32]: invalid pointer: the slice does not start where its block does (re-sliced from further in)")
	_, err = Resize(a, small, -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = Resize(a, small, 1<<62)
	require.ErrorIs(t, err, ErrOverflow)
	require.Equal(t, []int32{1, 2, 3}, small)

	none, err := Resize(a, small, 0)
	require.NoError(t, err)
	require.Nil(t, none)
	require.Zero(t, a.Stats().BlocksLive)
	made, err := Resize[int32](a, nil, 5)
	require.NoError(t, err)
	require.Equal(t, make([]int32, 5), made)
	require.NoError(t, FreeSlice(a, made))
}

func TestResizeFailureKeepsTheSlice(t *testing.T) {
	a := mustNew(t, memspace.Default, WithPoolSize(64<<10), WithFallback(traits.NullFb))
	xs, err := Make[byte](a, 1000)
	require.NoError(t, err)
	xs[999] = 7
	_, err = Resize(a, xs, 1<<20)
	require.ErrorIs(t, err, ErrPoolExhausted)
	require.Equal(t, byte(7), xs[999])
	info, err := InspectSlice(xs)
	require.NoError(t, err)
	require.Equal(t, uintptr(1000), info.Size)
	require.NoError(t, FreeSlice(a, xs))
}

func addr[T any](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }
