package alloc

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/partition"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 22, item 2: errors read in Go's order (the operation or allocator
// first, then the cause), say each sentinel once, match every sentinel
// they name with errors.Is, and none they do not (a refused pin is not a
// lack of memory). Before: "allocator destroyed: allocator#1024(...)",
// "allocator pool exhausted: allocator#1025(...): ...", "block already
// freed: 0x...", and pin failures matching ErrOutOfMemory.
func TestErrorStringsShape(t *testing.T) {
	t.Setenv(envvar.PinnedLimit, "")
	var goMem [64]byte
	for _, tc := range []struct {
		name   string
		err    func(t *testing.T) (err error, prefix string)
		is     []error // each matched, its text said exactly once
		not    []error // not matched
		notPre string  // the message must not start with this
	}{
		{"Free of a pointer from the Go heap", func(t *testing.T) (error, string) {
			return Free(unsafe.Pointer(&goMem[8])), "Free(0x"
		}, []error{ErrInvalidPointer}, []error{ErrDoubleFree}, "invalid pointer"},
		{"double free", func(t *testing.T) (error, string) {
			a := mustNew(t, memspace.Default, WithFallback(traits.NullFb))
			p, err := a.Alloc(100)
			require.NoError(t, err)
			require.NoError(t, Free(p))
			return Free(p), "Free(0x"
		}, []error{ErrDoubleFree}, []error{ErrInvalidPointer}, "block already freed"},
		{"Realloc of a pointer from the Go heap", func(t *testing.T) (error, string) {
			_, err := realloc(unsafe.Pointer(&goMem[8]), 100, nil)
			return err, "Realloc(0x"
		}, []error{ErrInvalidPointer}, nil, "invalid pointer"},
		{"pool_size exceeded under null_fb", func(t *testing.T) (error, string) {
			a := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallback(traits.NullFb))
			_, err := a.Alloc(8192)
			return err, a.String() + ": "
		}, []error{ErrPoolExhausted}, []error{ErrOutOfMemory}, "allocator pool exhausted"},
		{"pinned-bytes limit under null_fb", func(t *testing.T) (error, string) {
			Trim()
			old := SetPinnedLimit(64 << 10)
			t.Cleanup(func() { SetPinnedLimit(old); Trim() })
			a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
			_, err := a.Alloc(1 << 20)
			return err, a.String() + ": "
		}, []error{ErrPinFailed}, []error{ErrOutOfMemory}, "out of memory"},
		{"the lock refused under null_fb", func(t *testing.T) (error, string) {
			Trim()
			a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
			armFault(t, fault.PinLock, 0, nil)
			_, err := a.Alloc(8 << 20)
			return err, a.String() + ": "
		}, []error{ErrPinFailed, fault.ErrInjected}, []error{ErrOutOfMemory}, "out of memory"},
		{"Alloc after Destroy", func(t *testing.T) (error, string) {
			a, err := New(memspace.Default)
			require.NoError(t, err)
			require.NoError(t, a.Destroy())
			_, err = a.Alloc(10)
			return err, a.String() + ": "
		}, []error{ErrDestroyed}, nil, "allocator destroyed"},
		{"Destroy twice", func(t *testing.T) (error, string) {
			a, err := New(memspace.Default)
			require.NoError(t, err)
			require.NoError(t, a.Destroy())
			return a.Destroy(), a.String() + ": "
		}, []error{ErrDestroyed}, nil, "allocator destroyed"},
		{"Destroy with a live block", func(t *testing.T) (error, string) {
			a, err := New(memspace.Default)
			require.NoError(t, err)
			p, err := a.Alloc(10)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, Free(p)) })
			return a.Destroy(), a.String() + ": "
		}, []error{ErrLiveBlocks}, nil, "allocator destroyed"},
		{"Destroy of a predefined allocator", func(t *testing.T) (error, string) {
			return Default().Destroy(), Default().String() + ": "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"a target memory space on a bad device", func(t *testing.T) (error, string) {
			a := mustNew(t, memspace.TargetDevice, WithTrait(traits.PreferredDevice, 99), WithFallback(traits.NullFb))
			_, err := a.Alloc(100)
			return err, a.String() + ": device error: device 99: "
		}, []error{ErrDevice, target.ErrBadDevice}, []error{ErrOutOfMemory}, "device error"},
		{"a bad pin device", func(t *testing.T) (error, string) {
			_, err := New(memspace.Default, WithPinned(true), WithPinDevice(99))
			return err, "invalid allocator trait omp_atk_pin_device=99: device 99: "
		}, []error{ErrInvalidTrait}, nil, ""},
		// The rest began with their sentinel, the operation after it
		// ("invalid argument: Make[float64] of negative length -1").
		{"Make of a negative length", func(t *testing.T) (error, string) {
			_, err := Make[float64](Default(), -1)
			return err, "Make[float64]: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"Make of a type holding pointers", func(t *testing.T) (error, string) {
			_, err := Make[*int](Default(), 1)
			return err, "Make[*int]: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"Resize to a negative length", func(t *testing.T) (error, string) {
			_, err := Resize[float64](Default(), nil, -1)
			return err, "Resize[float64]: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"InspectSlice of an empty slice", func(t *testing.T) (error, string) {
			_, err := InspectSlice[float64](nil)
			return err, "InspectSlice[float64]: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"Inspect of a pointer from the Go heap", func(t *testing.T) (error, string) {
			_, err := Inspect(unsafe.Pointer(&goMem[8]))
			return err, "Inspect(0x"
		}, []error{ErrInvalidPointer}, nil, "invalid pointer"},
		{"AlignedAlloc with a bad alignment", func(t *testing.T) (error, string) {
			_, err := Default().AlignedAlloc(48, 100)
			return err, "alignment 48: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"Calloc overflowing", func(t *testing.T) (error, string) {
			_, err := Default().Calloc(1<<40, 1<<40)
			return err, "1099511627776 elements of 1099511627776 bytes: "
		}, []error{ErrOverflow}, nil, "size overflow"},
		{"New on no memory space", func(t *testing.T) (error, string) {
			_, err := New(memspace.ID(12345))
			return err, "new allocator: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"a Buffer freed twice", func(t *testing.T) (error, string) {
			b, err := NewBuffer[float64](Default(), 4)
			require.NoError(t, err)
			require.NoError(t, b.Free())
			return b.Free(), "Free of a Buffer[float64]"
		}, []error{ErrDoubleFree}, nil, "block already freed"},
		{"FreeAfter with no queue", func(t *testing.T) (error, string) {
			return FreeAfter(unsafe.Pointer(&goMem[8]), nil), "FreeAfter(0x"
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"FreeAfter of a freed block", func(t *testing.T) (error, string) {
			p, err := Default().Alloc(100)
			require.NoError(t, err)
			require.NoError(t, Free(p))
			return FreeAfter(p, new(target.Queue)), "FreeAfter(0x"
		}, []error{ErrDoubleFree}, []error{ErrInvalidPointer}, "block already freed"},
		{"Realloc of target memory", func(t *testing.T) (error, string) {
			a := mustNew(t, memspace.TargetHost, WithFallback(traits.NullFb))
			p, err := a.Alloc(64)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, Free(p)) })
			_, err = realloc(p, 128, nil)
			return err, "target memory at 0x"
		}, []error{ErrNotSupported}, nil, "not supported"},
		{"a partitioner destroyed twice", func(t *testing.T) (error, string) {
			p, err := partition.New(partition.Static, func(*partition.MemPartition) {}, nil)
			require.NoError(t, err)
			require.NoError(t, p.Destroy())
			return p.Destroy(), "partitioner "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"a partitioner without compute", func(t *testing.T) (error, string) {
			_, err := partition.New(partition.Static, nil, nil)
			return err, "partitioner: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"SetPart before Init", func(t *testing.T) (error, string) {
			return new(partition.MemPartition).SetPart(0, 0, 4096), "part 0: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
		{"Init of no parts", func(t *testing.T) (error, string) {
			return new(partition.MemPartition).Init(0, 0), "a partition of 0 parts: "
		}, []error{ErrInvalidArgument}, nil, "invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, prefix := tc.err(t)
			require.Error(t, err)
			msg := err.Error()
			t.Log(msg)
			require.True(t, strings.HasPrefix(msg, prefix), "%q does not start with %q", msg, prefix)
			if tc.notPre != "" {
				require.False(t, strings.HasPrefix(msg, tc.notPre), "%q starts with its cause", msg)
			}
			for _, s := range tc.is {
				require.ErrorIs(t, err, s)
				require.Equal(t, 1, strings.Count(msg, s.Error()), "%q said once in %q", s, msg)
			}
			for _, s := range tc.not {
				require.NotErrorIs(t, err, s)
			}
			require.NotContains(t, msg, "ompalloc: ", "a library's error does not name the library")
		})
	}
}

// A chain of fallbacks that all fail names each allocator once, the one
// asked first (was "...; its fallback allocator#1027(...) failed too:
// allocator#1027(...): ...").
func TestFallbackChainErrorNamesEachAllocatorOnce(t *testing.T) {
	b := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallback(traits.NullFb))
	c := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallbackAllocator(b))
	d := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallbackAllocator(c))
	_, err := d.Alloc(8192)
	require.ErrorIs(t, err, ErrPoolExhausted)
	msg := err.Error()
	t.Log(msg)
	require.True(t, strings.HasPrefix(msg, d.String()+": allocator pool exhausted: "), "%s", msg)
	for _, a := range []*Allocator{b, c, d} {
		require.Equal(t, 1, strings.Count(msg, a.String()+":"), "%s named once in %s", a, msg)
	}
	require.Equal(t, 2, strings.Count(msg, "; its fallback failed too: "), "%s", msg)
}
