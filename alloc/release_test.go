package alloc_test

import (
	"runtime"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 23: a chunk let go outside Trim (a free leaves more empty chunks
// than the pool keeps) stayed mapped, locked and counted in Stats until the
// next garbage collection: a user who freed and then read VmLck or Stats
// saw the memory still held, for as long as the program made no garbage.
// With collections off, the frees themselves must now give the chunks back,
// and VmLck, the registry and Stats agree right after.
func TestReleasedChunkGoesBackWithoutGC(t *testing.T) {
	gc := debug.SetGCPercent(-1) // no collection may do the release for the frees
	t.Cleanup(func() { debug.SetGCPercent(gc) })
	// What the per-P caches keep after the frees holds up to two chunks
	// per P from being empty: two Ps, so that twelve chunks show it.
	procs := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	// One heap: where the pinned pool has a heap per node, a goroutine
	// moved to another node's CPU would spread the blocks over two heaps,
	// each keeping PoolKeepChunks empty (seen in the NUMA guest: 13 of 14
	// chunks left).
	alloc.StayOnOneNode(t)
	alloc.Trim()
	base := leakcheck.Start()
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()); alloc.Trim() })

	const chunks = 12 // three times what the pool keeps empty
	n := chunks * heap.ChunkSize / 16384
	ps := make([]unsafe.Pointer, 0, n)
	for range n {
		p, err := a.Alloc(16000)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	full := alloc.ReadPinnedStats()
	vmFull, hasVm := leakcheck.VmLckKiB()
	require.GreaterOrEqual(t, full.Chunks, chunks)
	require.NoError(t, base.Consistent())

	for _, p := range ps {
		require.NoError(t, alloc.Free(p))
	}
	after := alloc.ReadPinnedStats()
	t.Logf("pinned chunks: %d with %d blocks live, %d after freeing them (the pool keeps %d empty)",
		full.Chunks, n, after.Chunks, alloc.PoolKeepChunks)
	require.LessOrEqual(t, after.Chunks, alloc.PoolKeepChunks+2*2, "the chunks beyond those kept went back at the frees")
	require.Less(t, after.Bytes, full.Bytes)
	require.NoError(t, base.Consistent(), "VmLck, the registry and Stats agree right after the frees")
	if hasVm {
		vm, _ := leakcheck.VmLckKiB()
		require.Equal(t, int(full.Bytes-after.Bytes)>>10, vmFull-vm, "VmLck dropped by what Stats did")
	}
}
