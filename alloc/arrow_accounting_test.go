package alloc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// AllocatedBytes follows Allocate, Reallocate (in place and moved) and
// Free, across copies of the value, as Arrow's Mallocator reports it.
func TestArrowAllocatedBytes(t *testing.T) {
	a, err := New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()) })
	mem := NewArrowAllocator(a)
	cp := mem // a copy shares the count
	require.Zero(t, mem.AllocatedBytes())

	x := mem.Allocate(100)
	require.Equal(t, int64(100), cp.AllocatedBytes())
	y := cp.Allocate(50)
	require.Equal(t, int64(150), mem.AllocatedBytes())
	x = mem.Reallocate(90, x) // in place
	require.Equal(t, int64(140), mem.AllocatedBytes())
	x = mem.Reallocate(1<<20, x) // moved
	require.Equal(t, int64(1<<20+50), mem.AllocatedBytes())
	mem.Free(x[:0]) // re-sliced to length 0, as Arrow may
	require.Equal(t, int64(50), mem.AllocatedBytes())
	y = mem.Reallocate(0, y)
	require.Zero(t, mem.AllocatedBytes())
	require.Empty(t, y)

	other := NewArrowAllocator(a)
	z := other.Allocate(10)
	require.Zero(t, mem.AllocatedBytes(), "each NewArrowAllocator counts its own")
	other.Free(z)
	require.Zero(t, ArrowAllocator{}.AllocatedBytes())
}

// Trim gives a pinned pool's retained memory back, counted in the bytes it
// returns, and ReadPinnedStats' Pools show the pool before and after.
func TestTrimPinnedPool(t *testing.T) {
	stayOnOneNode(t)
	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(host.ID), WithFallback(traits.NullFb))
	p, err := a.Alloc(3 << 20) // a huge region of its own, kept locked when freed
	if err != nil {
		t.Skipf("cannot pin 4 MiB here: %v", err)
	}
	require.NoError(t, Free(p))
	st, ok := readPinnedPool(host.ID)
	require.True(t, ok)
	require.NotZero(t, st.Retained, "the freed region is kept for reuse while the allocator lives")
	require.GreaterOrEqual(t, st.FreeBlocks, 1, "the retained region is a free block")
	free := st.FreeBlocks
	found := false
	for _, ps := range ReadPinnedStats().Pools {
		found = found || ps.Device == host.ID && ps.Bound == nil && ps.Retained == st.Retained
	}
	require.True(t, found, "ReadPinnedStats().Pools has the pool")

	released := Trim()
	require.GreaterOrEqual(t, released, st.Retained)
	st, _ = readPinnedPool(host.ID)
	require.Zero(t, st.Retained)
	require.Less(t, st.FreeBlocks, free, "the trim gave free blocks back")
}

// wrapped is the kind of value a library holds: an Interface that is not
// an *Allocator (here it wraps one, counting calls).
type wrapped struct {
	Interface
	frees int
}

func (w *wrapped) Free(p unsafe.Pointer) error { w.frees++; return w.Interface.Free(p) }

// NewArrowAllocator takes any Interface: blocks are 64-byte aligned and
// zeroed, Reallocate keeps the bytes, AllocatedBytes counts, and a slice
// it did not hand out is refused.
func TestArrowAllocatorOverAnInterface(t *testing.T) {
	a, err := New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()) })
	w := &wrapped{Interface: a}
	mem := NewArrowAllocator(w)
	x := mem.Allocate(1000)
	require.Zero(t, uintptr(unsafe.Pointer(&x[0]))%arrowAlignment)
	require.Equal(t, make([]byte, 1000), x)
	for i := range x {
		x[i] = byte(i)
	}
	require.Equal(t, int64(1000), mem.AllocatedBytes())
	x = mem.Reallocate(5000, x)
	require.Equal(t, byte(999%256), x[999])
	require.Equal(t, make([]byte, 4000), x[1000:], "the grown part is zero")
	require.Equal(t, int64(5000), mem.AllocatedBytes())
	require.Equal(t, 1, w.frees, "the old block went back through the interface")

	foreign := NewArrowAllocator(a).Allocate(10)
	err = recovered(t, func() { mem.Free(foreign) })
	require.ErrorIs(t, err, ErrInvalidPointer)
	NewArrowAllocator(a).Free(foreign)

	mem.Free(x[:0])
	require.Zero(t, mem.AllocatedBytes())
	require.Equal(t, 2, w.frees)
	require.Zero(t, a.Stats().BlocksLive)
	var none *Allocator
	require.NotPanics(t, func() { NewArrowAllocator(none).Free(NewArrowAllocator(none).Allocate(8)) }, "a nil *Allocator is the default")
}
