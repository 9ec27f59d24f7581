package alloc

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// baseline is what must hold again once a fault test has freed what it
// holds: no live blocks, no pinned bytes after a trim, no registry entries,
// VmLck where it was.
type baseline struct {
	pinnedUsed uintptr
	regLen     int
	vmLck      int
	live       int64
}

func takeBaseline(t *testing.T) baseline {
	t.Helper()
	Trim()
	_, used := pinnedLimit()
	return baseline{pinnedUsed: used, regLen: defaultRegistryLen(t), vmLck: vmLckKiB(t), live: liveTotal()}
}

func defaultRegistryLen(t *testing.T) int {
	d, err := target.Get(target.DefaultDevice())
	require.NoError(t, err)
	return d.Registry().Stats().Entries
}

func liveTotal() int64 {
	var n int64
	for _, l := range LiveBlocks() {
		n += l.Blocks
	}
	return n
}

func (b baseline) require(t *testing.T) {
	t.Helper()
	Trim()
	_, used := pinnedLimit()
	require.Equal(t, b.pinnedUsed, used, "pinned bytes back to baseline")
	require.Equal(t, b.regLen, defaultRegistryLen(t), "registry back to baseline")
	require.Equal(t, b.vmLck, vmLckKiB(t), "VmLck back to baseline")
	require.Equal(t, b.live, liveTotal(), "live blocks back to baseline: %v", LiveBlocks())
}

// fill and check a block with a pattern, so that a fallback's memory is
// known to be usable.
func usable(t *testing.T, p unsafe.Pointer, n uintptr) {
	t.Helper()
	require.NotNil(t, p)
	fill(p, n, 0x5a)
	require.True(t, allIs(p, n, 0x5a))
}

// Faults at each point where memory is obtained, under each fallback trait.
// After each: the trait was obeyed, nothing leaked, the next allocation
// succeeds.
func TestFaultsObeyFallbacks(t *testing.T) {
	points := []struct {
		point  string
		pinned bool
		size   uintptr // large enough that the heap must acquire memory
		cause  error   // what a null_fb allocation reports
	}{
		{fault.HeapAcquire, false, 8 << 20, ErrOutOfMemory},
		{fault.PinMap, true, 1000, ErrOutOfMemory}, // mapping failed: no memory, not a pin failure
		{fault.PinLock, true, 1000, ErrPinFailed},
		{fault.PinLock, true, 8 << 20, ErrPinFailed},
	}
	injected := 0
	for _, pt := range points {
		for _, fb := range []string{"null_fb", "default_mem_fb", "abort_fb", "allocator_fb"} {
			t.Run(fmt.Sprintf("%s/%d/%s", pt.point, pt.size, fb), func(t *testing.T) {
				base := takeBaseline(t)
				opts := []Option{WithPinned(pt.pinned)}
				var fbAlloc *Allocator
				switch fb {
				case "null_fb":
					opts = append(opts, WithFallback(traits.NullFb))
				case "default_mem_fb":
					opts = append(opts, WithFallback(traits.DefaultMemFb))
				case "abort_fb":
					opts = append(opts, WithFallback(traits.AbortFb))
				case "allocator_fb":
					// The fallback draws from the other kind of source, so the
					// fault does not hit it too.
					fbAlloc = mustNew(t, memspace.Default, WithPinned(!pt.pinned), WithFallback(traits.NullFb))
					opts = append(opts, WithFallbackAllocator(fbAlloc))
				}
				a := mustNew(t, memspace.Default, opts...)
				held := holdBlocks(t)
				defStats := Default().Stats()

				// Fail a's attempt only: a fallback on the same kind of source
				// gets memory on its own attempt. A pinned attempt asks every
				// heap of the pool (one per NUMA node where the pool is split)
				// before it fails, so there every call fails: no fallback here
				// pins.
				nth, fired := 1, 1
				if pt.pinned {
					nth, fired = 0, len(pinnedPoolFor(target.DefaultDevice()).heaps)
				}
				disarm := armFault(t, pt.point, nth, nil)
				var p unsafe.Pointer
				var err error
				if fb == "abort_fb" {
					msg := func() (msg any) {
						defer func() { msg = recover() }()
						p, err = a.Alloc(pt.size)
						return nil
					}()
					require.NotNil(t, msg, "abort_fb panics")
					require.Contains(t, msg, "abort_fb")
					require.Contains(t, msg, fault.ErrInjected.Error(), "the panic gives the reason")
					require.Nil(t, p)
				} else {
					p, err = a.Alloc(pt.size)
				}
				require.Equal(t, fired, fault.Fired(pt.point), "the fault was injected")
				disarm()
				if p != nil {
					held[p] = true
				}
				injected++

				switch fb {
				case "null_fb":
					require.Nil(t, p)
					require.ErrorIs(t, err, pt.cause)
					require.ErrorIs(t, err, fault.ErrInjected)
					if pt.cause == ErrPinFailed {
						// Issue 22: memory was there, the lock was refused.
						require.NotErrorIs(t, err, ErrOutOfMemory)
						require.False(t, strings.HasPrefix(err.Error(), "out of memory"), "%v", err)
					}
				case "default_mem_fb":
					require.NoError(t, err)
					usable(t, p, pt.size)
					o, err := ownerOf(p)
					require.NoError(t, err)
					require.Same(t, Default(), o, "served by omp_default_mem_alloc")
					require.False(t, isPinned(t, p), "default memory is not pinned")
					require.Equal(t, uint64(1), a.Stats().Fallbacks)
					require.Equal(t, defStats.BlocksLive+1, Default().Stats().BlocksLive)
				case "allocator_fb":
					require.NoError(t, err)
					usable(t, p, pt.size)
					o, err := ownerOf(p)
					require.NoError(t, err)
					require.Same(t, fbAlloc, o)
					require.Equal(t, !pt.pinned, isPinned(t, p))
				}
				if p != nil {
					held.free(t, p)
				}
				require.Zero(t, a.Stats().BlocksLive)

				// The next allocation, with nothing injected, is served by a
				// itself, pinned if a is.
				q, err := a.Alloc(pt.size)
				require.NoError(t, err)
				held[q] = true
				usable(t, q, pt.size)
				o, err := ownerOf(q)
				require.NoError(t, err)
				require.Same(t, a, o)
				require.Equal(t, pt.pinned, isPinned(t, q))
				held.free(t, q)
				require.NoError(t, a.Destroy())
				if fbAlloc != nil {
					require.NoError(t, fbAlloc.Destroy())
				}
				base.require(t)
			})
		}
	}
	t.Logf("faults injected and survived: %d", injected)
}

// Every acquisition failing: a chain of fallbacks on the same kind of
// source all fail, the error says why, nothing leaks, and blocks already
// live are untouched.
func TestFaultEveryCallFailsWholeChain(t *testing.T) {
	base := takeBaseline(t)
	held := holdBlocks(t)
	live, err := Default().Alloc(300)
	require.NoError(t, err)
	held[live] = true
	fill(live, 300, 0x33)
	a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	b := mustNew(t, memspace.Default, WithPinned(true), WithFallbackAllocator(a))
	Trim()
	disarm := armFault(t, fault.PinLock, 0, nil)
	for range 3 {
		p, err := b.Alloc(5000)
		require.Nil(t, p)
		require.ErrorIs(t, err, ErrPinFailed)
		require.ErrorIs(t, err, fault.ErrInjected)
	}
	// With a heap per NUMA node, each allocator's failed lock is retried
	// on every other node's heap.
	heaps := len(pinnedPoolFor(target.DefaultDevice()).heaps)
	require.Equal(t, 3*2*heaps, fault.Fired(fault.PinLock), "b and then a tried each time, on each of %d heaps", heaps)
	disarm()
	require.True(t, allIs(live, 300, 0x33))
	held.free(t, live)
	p, err := b.Alloc(5000)
	require.NoError(t, err)
	held[p] = true
	require.True(t, isPinned(t, p))
	held.free(t, p)
	require.NoError(t, b.Destroy())
	require.NoError(t, a.Destroy())
	base.require(t)
}

// Realloc and Calloc through a fault: the old block stays valid and
// unchanged when the new one cannot be had.
func TestFaultDuringReallocKeepsOldBlock(t *testing.T) {
	base := takeBaseline(t)
	a := mustNew(t, memspace.Default, WithFallback(traits.NullFb))
	p, err := a.Alloc(1000)
	require.NoError(t, err)
	fill(p, 1000, 0x77)
	disarm := armFault(t, fault.HeapAcquire, 0, nil)
	q, err := realloc(p, 16<<20, a)
	require.Nil(t, q)
	require.ErrorIs(t, err, fault.ErrInjected)
	c, err := a.Calloc(4<<20, 4)
	require.Nil(t, c)
	require.ErrorIs(t, err, ErrOutOfMemory)
	disarm()
	require.True(t, allIs(p, 1000, 0x77), "the old block is intact")
	q, err = realloc(p, 16<<20, a)
	require.NoError(t, err)
	require.True(t, allIs(q, 1000, 0x77), "contents moved")
	require.NoError(t, Free(q))
	require.NoError(t, a.Destroy())
	base.require(t)
}

// A block served by the fallback should still have the alignment the
// allocator's trait promised (alignment = max(trait, argument, 16)).
func TestFallbackKeepsAllocatorAlignment(t *testing.T) {
	base := takeBaseline(t)
	a := mustNew(t, memspace.Default, WithPinned(true), WithAlignment(4096), WithFallback(traits.DefaultMemFb))
	Trim()
	disarm := armFault(t, fault.PinLock, 0, nil)
	var ps []unsafe.Pointer
	misaligned := 0
	for range 8 {
		p, err := a.Alloc(100)
		require.NoError(t, err)
		if uintptr(p)%4096 != 0 {
			misaligned++
		}
		ps = append(ps, p)
	}
	disarm()
	for _, p := range ps {
		require.NoError(t, Free(p))
	}
	require.NoError(t, a.Destroy())
	base.require(t)
	require.Zero(t, misaligned, "blocks served by default_mem_fb keep the allocator's 4096-byte alignment")
}

// Promise 3: the cap on pinned bytes. Hitting it behaves like a failed pin
// (the fallback trait decides), the bytes counted never exceed it, and they
// return to the baseline once everything is freed and trimmed.
func TestPinnedLimitBehavesLikeAFailedPin(t *testing.T) {
	base := takeBaseline(t)
	max0, used0 := pinnedLimit()
	if runtime.GOOS == "linux" {
		require.NotZero(t, max0, "linux always has a default limit (RLIMIT_MEMLOCK or half of RAM)")
	}
	old := SetPinnedLimit(used0 + 3*4<<20) // room for three 4 MiB chunks
	defer SetPinnedLimit(old)
	nullFb := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	defFb := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.DefaultMemFb))
	var held []unsafe.Pointer
	var err error
	for range 64 {
		var p unsafe.Pointer
		p, err = nullFb.Alloc(1 << 20)
		max, used := pinnedLimit()
		require.LessOrEqual(t, used, max, "never above the limit")
		if err != nil {
			break
		}
		held = append(held, p)
	}
	require.ErrorIs(t, err, ErrPinFailed)
	require.ErrorContains(t, err, "pinned-memory limit")
	require.NotEmpty(t, held, "blocks fit until the limit")
	p, err := defFb.Alloc(1 << 20)
	require.NoError(t, err, "default_mem_fb: unpinned memory instead")
	require.False(t, isPinned(t, p))
	require.NoError(t, Free(p))
	for _, p := range held {
		require.True(t, isPinned(t, p))
		require.NoError(t, Free(p))
	}
	base.require(t)
}
