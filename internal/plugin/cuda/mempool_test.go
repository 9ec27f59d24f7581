package cuda

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

const livePoolBlocks = 5 // fakecuda_live: blocks the fake's pools hold

func poolMisuse(t *testing.T) int { return int(call(hookFn(t, "fakecuda_pool_misuse"))) }

// The fake's stream-ordered allocator promises what the reference does (see
// the quotes in fakecuda.c) and no more: a block freed on a stream is
// reused at once on that stream, on another only once the free completed;
// free memory above the release threshold goes back at a synchronization;
// TrimTo releases only frees the host observed; the default pool cannot be
// destroyed; only pool memory may be freed with cuMemFreeAsync; and a copy
// that touches a block after a later free of it completed is a misuse the
// fake counts.
func TestFakePoolFollowsTheReference(t *testing.T) {
	d0 := dev(t, 0)
	require.NoError(t, d0.Open())
	sym := func(name string) func(args ...uintptr) int {
		fn := rawSym(t, name)
		return func(args ...uintptr) int { return int(call(fn, args...)) }
	}
	push, pop := sym("cuCtxPushCurrent_v2"), sym("cuCtxPopCurrent_v2")
	attr := sym("cuDeviceGetAttribute")
	create, destroy, defPool := sym("cuMemPoolCreate"), sym("cuMemPoolDestroy"), sym("cuDeviceGetDefaultMemPool")
	alloc, free, trim := sym("cuMemAllocFromPoolAsync"), sym("cuMemFreeAsync"), sym("cuMemPoolTrimTo")
	setAttr, getAttr := sym("cuMemPoolSetAttribute"), sym("cuMemPoolGetAttribute")
	streamCreate, streamDestroy, streamSync := sym("cuStreamCreate"), sym("cuStreamDestroy_v2"), sym("cuStreamSynchronize")
	htodAsync := sym("cuMemcpyHtoDAsync_v2")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.Zero(t, push(d0.ctx))
	var popped uintptr
	defer pop(uintptr(unsafe.Pointer(&popped)))
	misuse0 := poolMisuse(t)

	var v int32
	require.Zero(t, attr(uintptr(unsafe.Pointer(&v)), cuDeviceAttributeMemoryPoolsSupported, 0))
	require.Equal(t, int32(1), v, "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED")

	var pool uintptr
	props := cuMemPoolProps{allocType: cuMemAllocationTypePinned, locType: cuMemLocationTypeDevice}
	require.Zero(t, create(uintptr(unsafe.Pointer(&pool)), uintptr(unsafe.Pointer(&props))))
	defer func() { require.Zero(t, destroy(pool)) }()
	reserved := func() uint64 {
		var r uint64
		require.Zero(t, getAttr(pool, cuMempoolAttrReservedMemCurrent, uintptr(unsafe.Pointer(&r))))
		return r
	}
	keep := ^uint64(0)
	require.Zero(t, setAttr(pool, cuMempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&keep))))
	t.Setenv("FAKECUDA_COPY_DELAY_US", "300000") // read by the streams' workers at creation
	var s1, s2 uintptr
	require.Zero(t, streamCreate(uintptr(unsafe.Pointer(&s1)), cuStreamNonBlocking))
	defer streamDestroy(s1)
	require.Zero(t, streamCreate(uintptr(unsafe.Pointer(&s2)), cuStreamNonBlocking))
	defer streamDestroy(s2)
	allocOn := func(s uintptr) uintptr {
		var p uintptr
		require.Zero(t, alloc(uintptr(unsafe.Pointer(&p)), 4096, pool, s))
		return p
	}

	p := allocOn(s1)
	require.Zero(t, streamSync(s1))
	buf, _ := hostBuf(t, 4096)
	open := holdStreams(t)
	require.Zero(t, htodAsync(p, buf, 4096, s1)) // held: s1 still writes p
	require.Zero(t, free(p, s1))
	require.Equal(t, p, allocOn(s1), "freed on s1: reused at once by s1, whose later work runs after")
	require.Zero(t, free(p, s1))
	other := allocOn(s2)
	require.NotEqual(t, p, other, "another stream gets the block only once the free completed")
	require.Zero(t, free(other, s2))
	open()
	require.Zero(t, streamSync(s1))
	require.Zero(t, streamSync(s2))
	got := allocOn(s2)
	require.Contains(t, []uintptr{p, other}, got, "completed frees are reused by any stream")
	require.Zero(t, free(got, s2))
	require.Equal(t, 1, free(got, s2), "a double free: CUDA_ERROR_INVALID_VALUE")
	dm, err := d0.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	require.Equal(t, 1, free(dm, s1), "memory no pool handed out: CUDA_ERROR_INVALID_VALUE")
	require.NoError(t, d0.Free(plugin.MemDevice, dm))
	require.Equal(t, misuse0, poolMisuse(t), "every use was in stream order")

	// TrimTo releases the frees the host observed (s2's, synchronized below).
	require.Zero(t, streamSync(s2))
	require.Equal(t, uint64(8192), reserved())
	require.Zero(t, trim(pool, 0))
	require.Zero(t, reserved())

	// With the default threshold (0), free memory goes back at the next
	// synchronization.
	zero := uint64(0)
	require.Zero(t, setAttr(pool, cuMempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&zero))))
	a, b := allocOn(s1), allocOn(s1)
	require.Zero(t, free(a, s1))
	require.Zero(t, free(b, s1))
	require.Zero(t, streamSync(s1))
	require.Zero(t, reserved(), "released at cuStreamSynchronize")

	// A copy on s2 that runs after a later free on s1 completed: the fake
	// counts the misuse (s2's worker waits 300 ms before its copy).
	require.Zero(t, setAttr(pool, cuMempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&keep))))
	m := allocOn(s1)
	require.Zero(t, streamSync(s1))
	require.Zero(t, htodAsync(m, buf, 4096, s2))
	require.Zero(t, free(m, s1))
	require.Zero(t, streamSync(s2))
	require.Equal(t, misuse0+1, poolMisuse(t), "a use after the free completed")
	require.Zero(t, streamSync(s1))

	var def uintptr
	require.Zero(t, defPool(uintptr(unsafe.Pointer(&def)), 0))
	require.Equal(t, 1, destroy(def), "a device's default memory pool cannot be destroyed")

	// An older driver: no pools.
	t.Setenv("FAKECUDA_NO_MEMPOOLS", "1")
	require.Zero(t, attr(uintptr(unsafe.Pointer(&v)), cuDeviceAttributeMemoryPoolsSupported, 0))
	require.Zero(t, v)
	var none uintptr
	require.Equal(t, 801, create(uintptr(unsafe.Pointer(&none)), uintptr(unsafe.Pointer(&props))), "CUDA_ERROR_NOT_SUPPORTED")
}

// The plugin's pool: allocations in a queue's order and without one, frees
// after the open queues' work, stats from the driver's attributes, trim.
func TestMemPoolOfDevice(t *testing.T) {
	d := dev(t, 1)
	require.NoError(t, d.Open())
	mp := d.MemPool()
	require.NotNil(t, mp, "the fake reports memory pools")
	misuse0 := poolMisuse(t)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()

	reserved0, used0, err := mp.Stats()
	require.NoError(t, err)
	p, err := mp.Alloc(1<<20, nil)
	require.NoError(t, err)
	reserved, used, err := mp.Stats()
	require.NoError(t, err)
	require.Equal(t, used0+1<<20, used)
	require.GreaterOrEqual(t, reserved, reserved0+1<<20)

	src, sb := hostBuf(t, 1<<20)
	pattern(sb, 3)
	open := holdStreams(t)
	require.NoError(t, d.Copy(p, src, 1<<20, plugin.HostToDevice, q)) // held
	done := make(chan error, 1)
	go func() { done <- mp.Free(p, nil, []plugin.QueueImpl{q}) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		open()
		t.Fatal("a free without a queue blocked the host until the queue's work completed")
	}
	p2, err := mp.Alloc(1<<20, q)
	require.NoError(t, err)
	require.NotEqual(t, p, p2, "the free waits for the queue's copy, which is held")
	open()
	require.NoError(t, mp.Free(p2, q, nil))
	require.NoError(t, q.Synchronize())
	require.Equal(t, misuse0, poolMisuse(t))

	require.Eventually(t, func() bool {
		require.NoError(t, mp.Trim(0))
		r, u, err := mp.Stats()
		require.NoError(t, err)
		return r == reserved0 && u == used0
	}, 10*time.Second, time.Millisecond, "trim gives back every completed free")
	calls0 := calls(t, "cuEventCreate")
	require.NoError(t, mp.Free(mustAlloc(t, mp), nil, []plugin.QueueImpl{q}))
	require.Equal(t, calls0, calls(t, "cuEventCreate"), "the queue's event is cached")
	require.Greater(t, live(t, livePoolBlocks), 0)
}

func mustAlloc(t *testing.T, mp plugin.MemPool) uintptr {
	p, err := mp.Alloc(4096, nil)
	require.NoError(t, err)
	return p
}

// realPool, which the GPU bundle runs on the real driver, passes on the fake.
func TestRealPoolOnFake(t *testing.T) {
	d := dev(t, 0)
	require.NoError(t, d.Open())
	src, sb := hostBuf(t, 1<<20)
	dst, db := hostBuf(t, 1<<20)
	realPool(t, d, src, sb, dst, db)
}
