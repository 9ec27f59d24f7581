package target

import (
	"context"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// driverAllocs is a fake driver's own count of the device-pool's driver
// allocations: misses, the blocks it newly reserved; hits, for the
// driver's stream-ordered pool, the allocations it served from a block it
// held already (-1 where the driver takes no part in a hit: the
// size-class cache).
type driverAllocs func(t *testing.T) (hits, misses int64)

// cudaPoolAllocs counts in the fake CUDA driver's stream-ordered pools.
func cudaPoolAllocs(t *testing.T) (hits, misses int64) {
	f := hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_pool_allocs")
	return int64(dlcall.Call(f, 1)), int64(dlcall.Call(f, 0))
}

// cudaMemAllocs counts the fake CUDA driver's cuMemAlloc calls.
func cudaMemAllocs(t *testing.T) (hits, misses int64) {
	name := []byte("cuMemAlloc\x00")
	n := int64(dlcall.Call(hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_calls"), uintptr(unsafe.Pointer(&name[0]))))
	runtime.KeepAlive(name)
	return -1, n
}

// hsaPoolAllocates counts the fake HSA runtime's successful
// hsa_amd_memory_pool_allocate calls.
func hsaPoolAllocates(t *testing.T) (hits, misses int64) {
	name := []byte("alloc_calls\x00")
	n := int64(dlcall.Call(hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_count"), uintptr(unsafe.Pointer(&name[0]))))
	runtime.KeepAlive(name)
	return -1, n
}

// Issue 31: the pool's hits and misses are counted on every kind of pool
// and match the driver's own counts: a miss is a block the driver newly
// reserved, a hit an allocation served from memory the pool held.
func poolHitsMatchTheDriver(t *testing.T, d *Device, drv driverAllocs) {
	const mib = 1 << 20
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	st0 := d.poolStats()
	h0, m0 := drv(t)

	a, err := d.PoolAlloc(mib, nil) // a miss: nothing cached
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(a, nil))
	b, err := d.PoolAlloc(mib, nil) // a hit: a's block
	require.NoError(t, err)
	c, err := d.PoolAlloc(2*mib, nil) // a miss: b holds the only block
	require.NoError(t, err)
	q := newQueue(t, d)
	require.NoError(t, d.PoolFree(c, q))
	e, err := d.PoolAlloc(2*mib, q) // a hit: c's block, freed in q's order
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(e, q))
	require.NoError(t, d.PoolFree(b, nil))
	require.NoError(t, q.Synchronize(context.Background()))

	st := d.poolStats()
	h1, m1 := drv(t)
	hits, misses := st.Hits-st0.Hits, st.Misses-st0.Misses
	require.Equal(t, uint64(4), st.Allocs-st0.Allocs)
	require.Equal(t, st.Allocs-st0.Allocs, hits+misses, "every allocation is a hit or a miss")
	require.Equal(t, uint64(m1-m0), misses, "a miss for each block the driver reserved")
	if h0 >= 0 {
		require.Equal(t, uint64(h1-h0), hits, "a hit for each allocation the driver served from its pool's memory")
	}
	require.Equal(t, uint64(2), hits, "%+v", st)
	require.Equal(t, uint64(2), misses, "%+v", st)
}

// Issue 31: PeakReserved is the true peak of the reservation, kept where
// it grows, not only when read: a pool block cached (reserved, not
// allocated) plus a direct allocation is the peak, although neither a
// reading nor the allocated bytes ever saw it and the trim gave it back
// before MemoryStats looked. (Before, the peak was that of the readings
// and the allocated bytes: 1 MiB less here.)
func peakReservedAtEveryMoment(t *testing.T, d *Device) {
	const mib = 1 << 20
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	d.ResetPeakMemoryStats()
	base := d.MemoryStats()
	require.Equal(t, base.Reserved, base.PeakReserved, "the reset makes the peak the current figure")

	p, err := d.PoolAlloc(2*mib, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(p, nil)) // cached: reserved, not allocated
	arr, err := AllocArray[byte](d, MemDevice, mib)
	require.NoError(t, err)
	require.NoError(t, arr.Free())
	d.TrimPool(0)

	st := d.MemoryStats()
	require.Equal(t, base.Reserved, st.Reserved, "all given back")
	require.Equal(t, base.Reserved+3*mib, st.PeakReserved, "the 2 MiB cached and the 1 MiB direct block were reserved together")
	require.Equal(t, base.Allocated+2*mib, st.PeakAllocated)
}
