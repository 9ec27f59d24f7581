package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

func poolAccess(t *testing.T, dev, peer int) int {
	return int(int32(call(hookFn(t, "fakecuda_pool_access"), uintptr(dev), uintptr(peer))))
}

// Issue 27 item 7: pool memory does not follow cuCtxEnablePeerAccess, so
// PeerAccess grants each direction access to the other device's pool
// (cuMemPoolSetAccess), for a pool made before the peers connected and for
// one made after. Run in a child: the pair's answer is kept per process.
// Seen failing before the fix: fakecuda_pool_access(0, 1) was 0.
func TestPeerAccessGrantsPoolAccess(t *testing.T) {
	needFake(t)
	runChild(t, "TestPeerAccessGrantsPoolAccessChild", "FAKECUDA_DEVICES=2", "FAKECUDA_PEER=all", "FAKECUDA_FAIL=")
}

func TestPeerAccessGrantsPoolAccessChild(t *testing.T) {
	inChild(t)
	d0, d1 := dev(t, 0), dev(t, 1)
	require.NoError(t, d0.Open())
	require.NoError(t, d1.Open())
	require.NotNil(t, d0.MemPool(), "device 0's pool, made before the peers connect")
	require.Zero(t, poolAccess(t, 0, 1), "by default a pool's blocks are its own device's only")
	ok, err := d0.PeerAccess(d1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, poolAccess(t, 0, 1), "device 1 may reach device 0's pool")
	require.NotNil(t, d1.MemPool(), "device 1's pool, made after")
	require.Equal(t, 1, poolAccess(t, 1, 0), "device 0 may reach device 1's pool")

	// A copy on device 1's stream from device 0's pool block needs that
	// access (the fake refuses it otherwise): it works now.
	mp0 := d0.MemPool()
	p, err := mp0.Alloc(4096, nil)
	require.NoError(t, err)
	b, err := d1.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, d1.Free(plugin.MemDevice, b)) }()
	q, err := d1.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	require.NoError(t, d1.Copy(b, p, 4096, plugin.DeviceToDevice, q))
	require.NoError(t, q.Synchronize())
	require.NoError(t, mp0.Free(p, nil, nil))
}

// The fake refuses a copy on another device's stream that touches a pool
// block without access (the reference: "By default, allocations are
// accessible only from the device where the allocations are located"),
// while cuMemcpyPeerAsync (p2h2p) needs none.
func TestFakePoolAccessIsTheDevicesOwn(t *testing.T) {
	needFake(t)
	runChild(t, "TestFakePoolAccessIsTheDevicesOwnChild", "FAKECUDA_DEVICES=2", "FAKECUDA_FAIL=")
}

func TestFakePoolAccessIsTheDevicesOwnChild(t *testing.T) {
	inChild(t)
	d0, d1 := dev(t, 0), dev(t, 1)
	require.NoError(t, d0.Open())
	require.NoError(t, d1.Open())
	mp0 := d0.MemPool()
	require.NotNil(t, mp0)
	p, err := mp0.Alloc(4096, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, mp0.Free(p, nil, nil)) }()
	b, err := d1.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, d1.Free(plugin.MemDevice, b)) }()
	q, err := d1.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	err = d1.Copy(b, p, 4096, plugin.DeviceToDevice, q)
	requireCode(t, err, "cuMemcpyDtoDAsync", cudaErrorInvalidValue, "CUDA_ERROR_INVALID_VALUE")
	// The staged peer path needs no access.
	require.NoError(t, d1.CopyPeer(b, d1, p, d0, 4096, q))
	require.NoError(t, q.Synchronize())
}

// CU_POINTER_ATTRIBUTE_CONTEXT of a stream-ordered allocation is NULL
// ("not context associated"); the device ordinal says where it lies.
func TestFakePoolPointerHasNoContext(t *testing.T) {
	d := dev(t, 0)
	require.NoError(t, d.Open())
	mp := d.MemPool()
	require.NotNil(t, mp)
	p, err := mp.Alloc(4096, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, mp.Free(p, nil, nil)) }()
	var ctx uintptr = 1
	require.NoError(t, d.attr(&ctx, 1, p)) // CU_POINTER_ATTRIBUTE_CONTEXT
	require.Zero(t, ctx)
	var ord int32 = -1
	require.NoError(t, d.withCtx("cuPointerGetAttribute", func() result {
		return call(d.drv.cuPointerGetAttribute, uintptr(unsafe.Pointer(&ord)), 9, p) // DEVICE_ORDINAL
	}))
	require.Equal(t, int32(d.dev), ord)
	a, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, a)) }()
	require.NoError(t, d.attr(&ctx, 1, a))
	require.Equal(t, d.ctx, ctx, "cuMemAlloc memory has its context")
}

// cuMemFree synchronizes across all streams (the Programming Guide: "Managing
// memory allocations using cudaMalloc and cudaFree causes the GPU to
// synchronize across all executing CUDA streams"): it returns only once the
// work of a non-blocking stream issued before it has completed. Seen failing
// before the fake's fix: cuMemFree returned with the stream's copy pending.
func TestFakeMemFreeWaitsForEveryStream(t *testing.T) {
	d := dev(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	a, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	b, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, b)) }()
	open := holdStreams(t)
	require.NoError(t, d.Copy(b, a, 4096, plugin.DeviceToDevice, q)) // held
	frees := calls(t, "cuMemFree")
	done := make(chan bool, 1)
	go func() {
		if err := d.Free(plugin.MemDevice, a); err != nil {
			done <- false
			return
		}
		ok, err := q.Query()
		done <- err == nil && ok
	}()
	for calls(t, "cuMemFree") == frees {
		runtime.Gosched()
	}
	open()
	require.True(t, <-done, "cuMemFree returned before the stream's work completed")
}

// Issue 27 item 8: MemPool answers nil after a failed cuMemPoolCreate but
// tries again at the next call; Close and MemPool racing are ordered (run
// with -race: closeMemPool read the pool outside the once before).
func TestMemPoolRetriesAfterAFailedCreate(t *testing.T) {
	needFake(t)
	runChild(t, "TestMemPoolRetriesAfterAFailedCreateChild", "FAKECUDA_DEVICES=2", "FAKECUDA_FAIL=cuMemPoolCreate:1")
}

func TestMemPoolRetriesAfterAFailedCreateChild(t *testing.T) {
	inChild(t)
	d := dev(t, 0)
	require.NoError(t, d.Open())
	require.Nil(t, d.MemPool(), "the first cuMemPoolCreate fails")
	mp := d.MemPool()
	require.NotNil(t, mp, "the second is tried and succeeds")
	require.Same(t, mp, d.MemPool())
	creates := calls(t, "cuMemPoolCreate")
	require.Same(t, mp, d.MemPool())
	require.Equal(t, creates, calls(t, "cuMemPoolCreate"), "made once, answered without a driver call")

	d1 := dev(t, 1)
	require.NoError(t, d1.Open())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = d1.MemPool() }()
	go func() { defer wg.Done(); require.NoError(t, d1.Close()) }()
	wg.Wait()
	require.Nil(t, d1.MemPool(), "no pool after Close")
}

// The pool does not let the driver make a nil-queue allocation wait for
// another stream's free (REUSE_ALLOW_INTERNAL_DEPENDENCIES off).
func TestMemPoolHasNoInternalDependencies(t *testing.T) {
	d := dev(t, 0)
	require.NoError(t, d.Open())
	mp, ok := d.MemPool().(*memPool)
	require.True(t, ok)
	var v int32 = -1
	require.NoError(t, d.withCtx("cuMemPoolGetAttribute", func() result {
		return call(d.drv.cuMemPoolGetAttribute, mp.pool, cuMempoolAttrReuseAllowInternalDependencies, uintptr(unsafe.Pointer(&v)))
	}))
	require.Zero(t, v)
}

// CUDA_ERROR_OUT_OF_MEMORY matches the plugin interface's vendor-neutral
// plugin.ErrOutOfMemory; other codes do not.
func TestOutOfMemoryIsVendorNeutral(t *testing.T) {
	require.True(t, errors.Is(&Error{Call: "cuMemAlloc", Code: cudaErrorOutOfMemory}, plugin.ErrOutOfMemory))
	require.False(t, errors.Is(&Error{Call: "cuMemAlloc", Code: cudaErrorInvalidValue}, plugin.ErrOutOfMemory))
}

// Issue 27 item 8: frees that wait for different queues do not share one
// stream: with queue A's work held (its stream alone, at the fake's
// "stream:%p" gate), a free waiting for A and B does not hold back a later
// free waiting for B and C only; the latter completes, and a trim gives its
// block back. Seen failing before the fix: both frees were on the pool's one
// free stream, the second behind the first.
func TestMemPoolFreesDoNotShareAStream(t *testing.T) {
	d := dev(t, 0)
	require.NoError(t, d.Open())
	mp, ok := d.MemPool().(*memPool)
	require.True(t, ok)
	const n = 1 << 16
	var qs [3]*Queue
	for i := range qs {
		qi, err := d.NewQueue()
		require.NoError(t, err)
		qs[i] = qi.(*Queue)
		defer func() { require.NoError(t, qi.Destroy()) }()
	}
	qa, qb, qc := qs[0], qs[1], qs[2]
	src, _ := hostBuf(t, n)
	pa, err := mp.Alloc(n, nil)
	require.NoError(t, err)
	pb, err := mp.Alloc(n, nil)
	require.NoError(t, err)
	name := fmt.Sprintf("stream:%#x", qa.handle()) // glibc prints %p as 0x and lowercase hex
	gate(t, name, true)
	open := func() { gate(t, name, false) }
	// Opened before the queues' Destroy, which waits for their work.
	defer open()
	require.NoError(t, d.Copy(pa, src, n, plugin.HostToDevice, qa)) // held: A alone
	require.NoError(t, d.Copy(pb, src, n, plugin.HostToDevice, qb))
	require.NoError(t, d.Copy(pb, src, n, plugin.HostToDevice, qc))
	require.NoError(t, mp.Free(pa, nil, []plugin.QueueImpl{qa, qb}))
	require.NoError(t, mp.Free(pb, nil, []plugin.QueueImpl{qb, qc}))
	require.NoError(t, qb.Synchronize())
	require.NoError(t, qc.Synchronize())
	done, err := qa.Query()
	require.NoError(t, err)
	require.False(t, done, "A's copy is held")
	reserved0, _, err := mp.Stats()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		require.NoError(t, mp.Trim(0))
		r, _, err := mp.Stats()
		require.NoError(t, err)
		return r <= reserved0-n
	}, 10*time.Second, time.Millisecond, "the free waiting for B and C completed while A is held")
	open()
	require.NoError(t, qa.Synchronize())
	require.Eventually(t, func() bool {
		require.NoError(t, mp.Trim(0))
		r, _, err := mp.Stats()
		require.NoError(t, err)
		return r <= reserved0-2*n
	}, 10*time.Second, time.Millisecond)
}
