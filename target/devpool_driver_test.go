package target

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const driverPoolChildEnv = "OMPALLOC_TARGET_DRIVERPOOL_CHILD"

// TestDriverPool runs TestDriverPoolChild over the fake drivers: the fake
// CUDA driver reporting memory pools (the device pool is the driver's
// stream-ordered allocator), the same driver as an older one
// (FAKECUDA_NO_MEMPOOLS=1: the size-class cache), and the fake HSA runtime
// (the size-class cache).
func TestDriverPool(t *testing.T) {
	if os.Getenv(driverPoolChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	for _, c := range []struct{ name, noPools string }{{"mempools", ""}, {"older-driver", "1"}} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDriverPoolChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
			cmd.Env = append(os.Environ(), driverPoolChildEnv+"="+c.name,
				"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=1", "FAKECUDA_NO_MEMPOOLS="+c.noPools, "FAKECUDA_FAIL=",
				"FAKECUDA_MEM_MB=64", "FAKEHSA_VRAM_MB=64",
				"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=1", "FAKEHSA_FAIL=", "OMPALLOC_DISABLE_CUDA=", "OMPALLOC_DISABLE_HSA=")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestDriverPoolChild", "%s", out)
			require.NotContains(t, string(out), "fakecuda: a copy", "the fake saw pool memory used out of stream order")
		})
	}
}

func TestDriverPoolChild(t *testing.T) {
	mode := os.Getenv(driverPoolChildEnv)
	if mode == "" {
		t.Skip("run by TestDriverPool")
	}
	cu, err := Get(0)
	require.NoError(t, err)
	require.Equal(t, "cuda", cu.Plugin())
	amd, err := Get(1)
	require.NoError(t, err)
	require.Equal(t, "amdgpu", amd.Plugin())
	misuse := func() int {
		return int(dlcall.Call(hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_pool_misuse")))
	}

	if mode == "mempools" {
		// First: the device's first pool allocation makes the driver's pool.
		t.Run("a failed cuMemPoolCreate is tried again", func(t *testing.T) { driverPoolCreateRetried(t, cu) })
	}
	t.Run("hsa keeps the size-class cache", func(t *testing.T) { sizeClassPool(t, amd) })
	cuCounts := driverAllocs(cudaPoolAllocs)
	if mode == "older-driver" {
		cuCounts = cudaMemAllocs
	}
	t.Run("cuda/hits and misses match the driver", func(t *testing.T) { poolHitsMatchTheDriver(t, cu, cuCounts) })
	t.Run("amdgpu/hits and misses match the driver", func(t *testing.T) { poolHitsMatchTheDriver(t, amd, hsaPoolAllocates) })
	for _, d := range []*Device{cu, amd} {
		t.Run(d.Plugin()+"/PeakReserved at every moment", func(t *testing.T) { peakReservedAtEveryMoment(t, d) })
	}
	for _, d := range []*Device{cu, amd} {
		t.Run(fmt.Sprintf("%s/free on one queue while another reads", d.Plugin()), func(t *testing.T) { poolFreeWhileAnotherQueueReads(t, d) })
		t.Run(fmt.Sprintf("%s/record use", d.Plugin()), func(t *testing.T) { poolRecordUse(t, d) })
		t.Run(fmt.Sprintf("%s/out of memory gives back and retries", d.Plugin()), func(t *testing.T) { poolOutOfMemory(t, d) })
	}
	if mode == "older-driver" {
		t.Run("cuda without memory pools keeps the size-class cache", func(t *testing.T) { sizeClassPool(t, cu) })
		t.Run("no driver call under the pool's mutex", func(t *testing.T) { poolNoDriverCallUnderMutex(t, cu) })
		require.Zero(t, misuse(), "every use of pool memory was in stream order")
		return
	}
	t.Run("SetPoolLimit trims outside the pool's mutex", func(t *testing.T) { driverPoolLimitOutsideMutex(t, cu) })
	t.Run("a nil-queue alloc does not wait for another queue's free", func(t *testing.T) { driverPoolNilAllocDoesNotWait(t, cu) })
	t.Run("a nil-queue free goes on the one busy queue", func(t *testing.T) { driverPoolNilFreeOnTheBusyQueue(t, cu) })
	t.Run("queue-aware reuse", func(t *testing.T) { driverPoolQueues(t, cu) })
	t.Run("free without a queue waits for every queue", func(t *testing.T) { driverPoolNilFree(t, cu) })
	t.Run("limit, threshold, trim, stats", func(t *testing.T) { driverPoolLimit(t, cu) })
	t.Run("frees racing queues that open and close", func(t *testing.T) { driverPoolHammer(t, cu) })
	require.Zero(t, misuse(), "every use of pool memory was in stream order")
}

// Goroutines allocate on queues of their own, copy into the block, free it
// without a queue (waiting for the busy queues, their life locks held) and
// close their queues, all at once: no deadlock, no use out of stream
// order, nothing left handed out.
func driverPoolHammer(t *testing.T, d *Device) {
	const workers, rounds, n = 4, 50, 4096
	src := make([]byte, n)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				for range rounds {
					q, err := d.NewQueue()
					if err != nil {
						return err
					}
					p, err := d.PoolAlloc(n, q)
					if err != nil {
						return err
					}
					arr, err := arrayOf[byte](memory{Device: d, Kind: MemDevice, Addr: p, Size: n})
					if err != nil {
						return err
					}
					if err := CopyToDevice(arr, src, q); err != nil {
						return err
					}
					if err := d.PoolFree(p, nil); err != nil {
						return err
					}
					if err := q.Close(); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the frees and closes deadlocked")
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, d.poolStats().InUse)
}

// sizeClassPool: the device pool is target's size-class cache: a freed
// block is a cached free block, and the next allocation of its class hits.
func sizeClassPool(t *testing.T, d *Device) {
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	hits := d.poolStats().Hits
	p, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(p, nil))
	st := d.poolStats()
	require.False(t, st.DriverPool)
	require.Equal(t, 1, st.FreeBlocks)
	p2, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	require.Equal(t, p, p2)
	require.Equal(t, hits+1, d.poolStats().Hits)
	require.NoError(t, d.PoolFree(p2, nil))
}

func newQueue(t *testing.T, d *Device) *Queue {
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	return q
}

func deviceBytes(t *testing.T, d *Device, p uintptr, n int) Array[byte] {
	arr, err := arrayOf[byte](memory{Device: d, Kind: MemDevice, Addr: p, Size: uintptr(n)})
	require.NoError(t, err)
	return arr
}

// A block freed on queue A while A's copy still writes it (the device is
// held) is reused at once by A, not by B; B gets it once A's work is done.
func driverPoolQueues(t *testing.T, d *Device) {
	const n = 4096
	qa, qb := newQueue(t, d), newQueue(t, d)
	p, err := d.PoolAlloc(n, qa)
	require.NoError(t, err)
	require.True(t, d.poolStats().DriverPool)
	release := holdWork(t, d)
	require.NoError(t, CopyToDevice(deviceBytes(t, d, p, n), make([]byte, n), qa)) // held: A writes p
	require.NoError(t, d.PoolFree(p, qa))

	pa, err := d.PoolAlloc(n, qa)
	require.NoError(t, err)
	require.Equal(t, p, pa, "A's later work runs after the free: A reuses the block at once")
	require.NoError(t, d.PoolFree(pa, qa))
	pb, err := d.PoolAlloc(n, qb)
	require.NoError(t, err)
	require.NotEqual(t, p, pb, "B must not get the block while A's copy may still write it")
	require.NoError(t, d.PoolFree(pb, qb))

	release()
	require.NoError(t, qa.Synchronize(context.Background()))
	got, err := d.PoolAlloc(n, qb)
	require.NoError(t, err)
	require.Contains(t, []uintptr{p, pb}, got, "once A's work is done, anyone reuses its blocks")
	require.NoError(t, d.PoolFree(got, qb))
	require.NoError(t, qb.Synchronize(context.Background()))
}

// A block freed without a queue while a queue's copy still writes it is
// not handed to another queue until that copy is done; the free itself
// does not block the host, and a queue known idle costs no driver call.
func driverPoolNilFree(t *testing.T, d *Device) {
	const n = 8192
	qa, qb := newQueue(t, d), newQueue(t, d)
	p, err := d.PoolAlloc(n, nil)
	require.NoError(t, err)
	release := holdWork(t, d)
	require.NoError(t, CopyToDevice(deviceBytes(t, d, p, n), make([]byte, n), qa)) // held: A writes p
	returns(t, release, "PoolFree without a queue", func() error { return d.PoolFree(p, nil) })
	pb, err := d.PoolAlloc(n, qb)
	require.NoError(t, err)
	require.NotEqual(t, p, pb, "B must not get the block while A's copy may still write it")
	require.NoError(t, d.PoolFree(pb, qb))
	release()
	require.NoError(t, qa.Synchronize(context.Background()))
	require.NoError(t, qb.Synchronize(context.Background()))
	// The free stream's wait and free run after A's copy: then p's free
	// completes and a trim gives every block back. (Which free block a
	// later allocation gets is the driver's choice: not asserted.)
	require.Eventually(t, func() bool {
		d.TrimPool(0)
		return d.poolStats().Reserved == 0
	}, 10*time.Second, time.Millisecond)

	// Both queues are known idle now: a free without a queue records no event.
	lib := os.Getenv("OMPALLOC_CUDA_LIBRARY")
	name := []byte("cuEventRecord\x00")
	calls := func() int {
		n := int(dlcall.Call(hook(t, lib, "fakecuda_calls"), uintptr(unsafe.Pointer(&name[0]))))
		runtime.KeepAlive(name)
		return n
	}
	before := calls()
	q, err := d.PoolAlloc(n, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(q, nil))
	require.Equal(t, before, calls(), "idle queues are not waited for")
}

// The limit refuses what would take the bytes handed out past it and is the
// release threshold: at the next synchronization the driver gives back free
// memory above it. TrimPool gives back the rest; the stats are the driver's.
func driverPoolLimit(t *testing.T, d *Device) {
	const mib = 1 << 20
	d.TrimPool(0)
	require.Zero(t, d.poolStats().Reserved)
	allocs0 := d.poolStats().Allocs
	d.SetPoolLimit(2 * mib)
	t.Cleanup(func() { d.SetPoolLimit(0); d.TrimPool(0) })
	a, err := d.PoolAlloc(mib, nil)
	require.NoError(t, err)
	b, err := d.PoolAlloc(mib, nil)
	require.NoError(t, err)
	_, err = d.PoolAlloc(4096, nil)
	require.ErrorIs(t, err, ErrPoolLimit)
	require.ErrorContains(t, err, "2097152 of 2097152 bytes handed out")
	require.NoError(t, d.PoolFree(a, nil))
	// Another size while a's block is free: 2.25 MiB reserved, above the
	// threshold; the allocation's own synchronization gives a's block back.
	c, err := d.PoolAlloc(mib/4, nil)
	require.NoError(t, err)
	st := d.poolStats()
	require.True(t, st.DriverPool)
	require.Equal(t, uintptr(2*mib), st.Limit)
	require.Equal(t, uintptr(mib+mib/4), st.Reserved, "free memory above the threshold went back at the synchronization")
	require.Equal(t, uintptr(mib+mib/4), st.InUse)
	require.Equal(t, allocs0+3, st.Allocs)

	require.NoError(t, d.PoolFree(b, nil))
	require.NoError(t, d.PoolFree(c, nil))
	st = d.poolStats()
	require.Zero(t, st.InUse)
	require.Equal(t, uintptr(mib+mib/4), st.Reserved, "below the threshold the freed blocks stay reserved")
	require.Equal(t, uintptr(mib/4), d.TrimPool(mib), "trim to 1 MiB gives back the 256 KiB block")
	require.Equal(t, uintptr(mib), d.TrimPool(0))
	require.Zero(t, d.poolStats().Reserved)
	require.ErrorIs(t, d.PoolFree(b, nil), ErrInvalidArgument, "a double free")
}
