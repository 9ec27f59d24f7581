package ompglue_test

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

func TestMain(m *testing.M) {
	testenv.Neutralize()
	os.Exit(leakcheck.Run(m))
}

// A predefined handle resolves before anything else in the process used
// alloc (this test runs first): Lookup makes the predefined allocators.
func TestLookupPredefinedFirst(t *testing.T) {
	for _, h := range predef.Handles() {
		a, ok := ompglue.Lookup(h)
		require.True(t, ok, "handle %d", h)
		require.Equal(t, h, ompglue.Handle(a))
		require.Equal(t, predef.Name(h), a.String())
		ms, _ := predef.Memspace(h)
		require.Equal(t, ms, a.Memspace())
	}
	def, ok := ompglue.Lookup(predef.Null)
	require.True(t, ok, "the null handle is the default allocator")
	require.Same(t, alloc.Default(), def)
	require.Equal(t, uintptr(predef.DefaultMem), ompglue.Handle(alloc.Default()))
}

// A made allocator's handle finds it until Destroy; then the handle names
// nothing, and Name says so by number.
func TestLookupMadeAndDestroyed(t *testing.T) {
	a, err := alloc.New(memspace.Default, alloc.WithAlignment(64))
	require.NoError(t, err)
	h := ompglue.Handle(a)
	require.GreaterOrEqual(t, h, uintptr(1024), "allocators made at run time number from 1024")
	got, ok := ompglue.Lookup(h)
	require.True(t, ok)
	require.Same(t, a, got)
	require.Equal(t, a.String(), ompglue.Name(h))
	require.NoError(t, a.Destroy())
	_, ok = ompglue.Lookup(h)
	require.False(t, ok, "a destroyed allocator's handle")
	require.Equal(t, predef.Name(h), ompglue.Name(h))
	for _, bad := range []uintptr{9, 99, 103, 1023, 1 << 40, ^uintptr(0)} {
		_, ok := ompglue.Lookup(bad)
		require.False(t, ok, "%d", bad)
	}
	require.Equal(t, "omp_null_allocator", ompglue.Name(predef.Null))
	require.Equal(t, "omp_high_bw_mem_alloc", ompglue.Name(predef.HighBwMem))
}

// Realloc with no allocator keeps a block in the allocator that served it,
// moves it to the default allocator once that one is destroyed, refuses a
// pointer that is no block as alloc does, and allocates for nil.
func TestReallocIntoTheBlocksOwnAllocator(t *testing.T) {
	a, err := alloc.New(memspace.Default, alloc.WithTrait(traits.Alignment, 4096))
	require.NoError(t, err)
	p, err := a.Alloc(100)
	require.NoError(t, err)
	*(*byte)(p) = 42
	q, err := ompglue.Realloc(p, 100_000)
	require.NoError(t, err)
	info, err := alloc.Inspect(q)
	require.NoError(t, err)
	require.Same(t, a, info.Allocator, "the block stays with its allocator")
	require.Zero(t, uintptr(q)%4096, "with its allocator's alignment")
	require.Equal(t, byte(42), *(*byte)(q))

	require.ErrorIs(t, a.Destroy(), alloc.ErrLiveBlocks)
	r, err := ompglue.Realloc(q, 50)
	require.NoError(t, err)
	info, err = alloc.Inspect(r)
	require.NoError(t, err)
	require.Same(t, alloc.Default(), info.Allocator, "a destroyed allocator takes no new block")
	require.Equal(t, byte(42), *(*byte)(r))

	var goMem [64]byte
	_, err = ompglue.Realloc(unsafe.Pointer(&goMem[0]), 10)
	require.ErrorIs(t, err, alloc.ErrInvalidPointer)
	require.ErrorContains(t, err, "Realloc(")

	n, err := ompglue.Realloc(nil, 10)
	require.NoError(t, err)
	info, err = alloc.Inspect(n)
	require.NoError(t, err)
	require.Same(t, alloc.Default(), info.Allocator)
	gone, err := ompglue.Realloc(n, 0)
	require.NoError(t, err)
	require.Nil(t, gone, "size 0 frees")
	require.NoError(t, alloc.Free(r))
}

// Containing finds a block from any address inside it, and nothing past
// its size or once it is freed.
func TestContaining(t *testing.T) {
	a, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()) })
	p, err := a.Alloc(100)
	require.NoError(t, err)
	for _, off := range []uintptr{0, 1, 99} {
		s, n, ok := ompglue.Containing(unsafe.Add(p, off))
		require.True(t, ok, "offset %d", off)
		require.Equal(t, p, s)
		require.Equal(t, uintptr(100), n)
	}
	_, _, ok := ompglue.Containing(unsafe.Add(p, 100))
	require.False(t, ok, "past the requested size")
	require.NoError(t, alloc.Free(p))
	_, _, ok = ompglue.Containing(p)
	require.False(t, ok, "freed")
}
