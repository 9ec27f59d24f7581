package alloc

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// needPinned skips unless n more bytes may be locked.
func needPinned(t *testing.T, n uintptr) {
	t.Helper()
	if max, used := pinnedLimit(); max != 0 && max-used < n {
		t.Skipf("the pinned-bytes limit (%d, %d in use; RLIMIT_MEMLOCK?) leaves less than %d bytes", max, used, n)
	}
}

func defaultPool(t *testing.T) PinnedPoolStats {
	t.Helper()
	st, ok := readPinnedPool(target.DefaultDevice())
	require.True(t, ok, "the default device has a pinned pool")
	return st
}

func TestStatsPinnedBytesAreTheAllocatorsOwn(t *testing.T) {
	Trim()
	needPinned(t, 8<<20)
	busy := mustNew(t, memspace.Default, WithPinned(true))
	idle := mustNew(t, memspace.Default, WithPinned(true))
	plain := mustNew(t, memspace.Default)

	p, err := busy.Alloc(1000)
	require.NoError(t, err)
	q, err := plain.Alloc(1000)
	require.NoError(t, err)
	require.Equal(t, int64(1000), busy.Stats().PinnedBytes)
	require.Zero(t, idle.Stats().PinnedBytes, "an allocator that allocated nothing has pinned nothing, whatever the pool holds")
	require.Zero(t, plain.Stats().PinnedBytes)
	require.GreaterOrEqual(t, defaultPool(t).Locked, uintptr(4<<20), "the pool's memory is the pool's")

	r, err := idle.Calloc(3, 1<<20) // a huge region of its own
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), idle.Stats().PinnedBytes)
	require.Equal(t, int64(1000), busy.Stats().PinnedBytes)
	require.NoError(t, Free(p))
	require.NoError(t, Free(q))
	require.NoError(t, Free(r))
	require.Zero(t, busy.Stats().PinnedBytes)
	require.Zero(t, idle.Stats().PinnedBytes)
}

func TestStatsFailuresAndFallbacks(t *testing.T) {
	strict := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.NullFb))
	lenient := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.DefaultMemFb))
	_, err := strict.Alloc(2 << 20)
	require.ErrorIs(t, err, ErrPoolExhausted)
	st := strict.Stats()
	require.Equal(t, uint64(1), st.Failures)
	require.Zero(t, st.Fallbacks)
	require.Zero(t, st.Allocs, "a failure is no allocation")

	p, err := lenient.Alloc(2 << 20)
	require.NoError(t, err)
	st = lenient.Stats()
	require.Equal(t, uint64(1), st.Fallbacks)
	require.Zero(t, st.Failures)
	require.Zero(t, st.BlocksLive, "the fallback's block counts in the fallback's Stats")
	require.NoError(t, Free(p))

	// A fallback that fails too: one failure, for the allocator asked.
	chained := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallbackAllocator(strict))
	_, err = chained.Alloc(2 << 20)
	require.ErrorIs(t, err, ErrPoolExhausted)
	require.Equal(t, uint64(1), chained.Stats().Failures)
	require.Equal(t, uint64(1), chained.Stats().Fallbacks)

	// abort_fb panics instead of returning: a failure all the same, of the
	// allocator asked, whether its own trait or its fallback's aborted.
	aborting := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.AbortFb))
	viaAborting := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallbackAllocator(aborting))
	for _, a := range []*Allocator{aborting, viaAborting} {
		require.Panics(t, func() { _, _ = a.Alloc(2 << 20) })
		st := a.Stats()
		require.Equal(t, uint64(1), st.Failures, "%v", a)
		require.Zero(t, st.Allocs, "%v", a)
	}
	require.Equal(t, uint64(1), aborting.Stats().Failures, "the chain's abort counts for the allocator asked only")
}

func TestPinnedPoolStats(t *testing.T) {
	Trim()
	needPinned(t, 16<<20)
	base, haveVmLck := vmLck(t)
	a := mustNew(t, memspace.Default, WithPinned(true))
	before := defaultPool(t)

	p, err := a.Alloc(100)
	require.NoError(t, err)
	h, err := a.Alloc(3 << 20) // over 2 MiB: a region of its own
	require.NoError(t, err)
	st := defaultPool(t)
	require.Equal(t, target.DefaultDevice(), st.Device)
	require.GreaterOrEqual(t, st.Chunks, 1)
	require.GreaterOrEqual(t, st.Huge, 1)
	require.Equal(t, uintptr(st.Chunks)*4<<20+3<<20, st.Locked-st.Retained, "chunks and regions are what is locked")
	require.GreaterOrEqual(t, st.Locks, before.Locks+1)
	if haveVmLck {
		now, _ := vmLck(t)
		require.Equal(t, int(st.Locked>>10), now-base, "the kernel's VmLck agrees")
	}

	require.NoError(t, Free(h))
	st = defaultPool(t)
	require.Equal(t, uintptr(3<<20), st.Retained, "a freed huge region is kept for reuse")
	require.GreaterOrEqual(t, st.Idle, uintptr(3<<20))
	require.NoError(t, Free(p))
	st = defaultPool(t)
	require.LessOrEqual(t, st.Idle, st.Locked)

	Trim()
	after := defaultPool(t)
	require.Zero(t, after.Locked)
	require.Zero(t, after.Chunks)
	require.Zero(t, after.Huge)
	require.Equal(t, after.Locks, after.Unlocks, "every lock was undone")
	require.GreaterOrEqual(t, after.LockTime, st.LockTime)
	if haveVmLck {
		now, _ := vmLck(t)
		require.Equal(t, base, now)
	}
	for _, ps := range readPinnedPools() {
		require.Zero(t, ps.Locked, "device %d", ps.Device)
	}
}

// Issue 10: destroying one pinned allocator dropped the shared pool from
// 12 MiB to 4 MiB while another allocator was about to reuse it.
func TestDestroyingOneAllocatorKeepsThePool(t *testing.T) {
	stayOnOneNode(t) // the three chunks of one heap
	Trim()
	needPinned(t, 16<<20)
	stays := mustNew(t, memspace.Default, WithPinned(true))
	held := holdBlocks(t)
	var blocks []unsafe.Pointer
	for range 6 { // two 1.5 MiB blocks per 4 MiB chunk: three chunks
		p, err := stays.Alloc(3 << 19)
		require.NoError(t, err)
		held[p] = true
		blocks = append(blocks, p)
	}
	for _, p := range blocks {
		held.free(t, p)
	}
	st := defaultPool(t)
	require.Equal(t, 3, st.Chunks)
	require.Equal(t, uintptr(12<<20), st.Locked)
	require.LessOrEqual(t, st.Idle, st.Locked)

	leaves := mustNew(t, memspace.Default, WithPinned(true))
	require.NoError(t, leaves.Destroy())
	st = defaultPool(t)
	require.Equal(t, uintptr(12<<20), st.Locked, "another allocator still draws on the pool: it keeps its memory")

	locks := st.Locks
	p, err := stays.Alloc(3 << 19)
	require.NoError(t, err)
	held[p] = true
	require.Equal(t, locks, defaultPool(t).Locks, "reused without a lock call")
	held.free(t, p)

	require.NoError(t, stays.Destroy())
	require.Zero(t, defaultPool(t).Locked, "the last allocator left: the pool gave back its idle memory")
}

// vmLck is VmLck in KiB, where the system reports it.
func vmLck(t *testing.T) (int, bool) {
	t.Helper()
	return procstatus.VmLckKiB()
}

// A NUMA-placed host heap (partition=interleaved) is neither the shared
// host heap nor pinned: its blocks say so, and its allocator pins nothing.
func TestPlacedHeapIsNotPinned(t *testing.T) {
	a := mustNew(t, memspace.Default, WithTrait(traits.Partition, traits.Interleaved))
	xs, err := Make[byte](a, 1000)
	require.NoError(t, err)
	require.False(t, target.IsPinned(xs))
	require.Zero(t, a.Stats().PinnedBytes)
	require.Equal(t, int64(1000), a.Stats().BytesLive)
	require.NoError(t, FreeSlice(a, xs))
}

// LiveBlocks lists each allocator with live blocks once, by its name, and
// in leak-check mode the stack of each block, by address.
func TestLiveBlocksListsEachAllocatorOnce(t *testing.T) {
	a := mustNew(t, memspace.Default)
	p, err := a.Alloc(10)
	require.NoError(t, err)
	defer func() { require.NoError(t, Free(p)) }()
	was := SetLeakCheck(true)
	t.Cleanup(func() { SetLeakCheck(was) })
	q, err := a.Alloc(20)
	require.NoError(t, err)
	defer func() { require.NoError(t, Free(q)) }()
	var mine []Live
	for _, l := range LiveBlocks() {
		if l.Allocator == a.String() {
			mine = append(mine, l)
		}
	}
	require.Len(t, mine, 1)
	require.Equal(t, int64(2), mine[0].Blocks)
	require.Equal(t, int64(30), mine[0].Bytes)
	require.False(t, mine[0].Destroyed)
	require.Len(t, mine[0].Stacks, 1, "the block allocated before leak-check mode has no stack")
	require.True(t, strings.HasPrefix(mine[0].Stacks[0], fmt.Sprintf("%#x, 20 bytes\n", uintptr(q))), mine[0].Stacks[0])
	require.Contains(t, mine[0].Stacks[0], "TestLiveBlocksListsEachAllocatorOnce")
}
