package kmp

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/target"
)

// Issue 21 item 4: omp_target_alloc, llvm_omp_target_alloc_device and
// allocators on the device memory space are served from the device's
// caching pool, on both fake drivers, each in a child process that loads it:
// the fake CUDA driver's stream-ordered pool, the size-class cache where it
// reports no memory pools (an older driver), and on HSA.
func TestTargetAllocPoolOnFakeGPU(t *testing.T) {
	for _, c := range []struct{ name, driver, lib, mempools string }{
		{"cuda", "cuda", "fakecuda", "1"},
		{"cuda-older-driver", "cuda", "fakecuda", "0"},
		{"amdgpu", "amdgpu", "fakehsa", "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib := fakedrv.Build(t, c.lib)
			cmd := exec.Command(os.Args[0], "-test.run=^TestTargetAllocPoolChild$", "-test.count=1", "-test.v")
			noPools := "FAKECUDA_NO_MEMPOOLS="
			if c.mempools == "0" {
				noPools += "1"
			}
			cmd.Env = append(os.Environ(), "OMPALLOC_KMP_CHILD=devpool", "OMPALLOC_KMP_DRIVER="+c.driver,
				"OMPALLOC_KMP_MEMPOOL="+c.mempools, noPools,
				"FAKECUDA_FAIL=", "FAKEHSA_FAIL=", "OMP_DEFAULT_DEVICE=", "FAKECUDA_MEM_MB=64", "FAKEHSA_VRAM_MB=64")
			if c.driver == "cuda" {
				cmd.Env = append(cmd.Env, "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=1", "OMPALLOC_DISABLE_CUDA=")
			} else {
				cmd.Env = append(cmd.Env, "OMPALLOC_HSA_LIBRARY="+lib, "OMPALLOC_DISABLE_CUDA=1", "OMPALLOC_DISABLE_HSA=", "FAKEHSA_GPUS=1")
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestTargetAllocPoolChild")
			require.NotContains(t, string(out), "warning")
			if c.mempools == "1" {
				require.Contains(t, string(out), "--- PASS: TestTargetAllocPoolChild/a_failing_cuMemAllocFromPoolAsync_or_cuMemFreeAsync")
			}
		})
	}
}

func TestTargetAllocPoolChild(t *testing.T) {
	if os.Getenv("OMPALLOC_KMP_CHILD") != "devpool" {
		t.Skip("run by TestTargetAllocPoolOnFakeGPU in a child process")
	}
	driver := os.Getenv("OMPALLOC_KMP_DRIVER")
	d, err := target.Get(0)
	require.NoError(t, err)
	require.Equal(t, driver, d.Plugin())

	// driverAllocs counts the driver's device-memory allocations so far;
	// live counts its live device allocations; blocks counts the driver's
	// blocks behind the pool (the live allocations, or the blocks its
	// stream-ordered pool holds).
	drvPool := os.Getenv("OMPALLOC_KMP_MEMPOOL") == "1"
	var driverAllocs, live, blocks func() int
	cstr := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	if driver == "cuda" {
		l, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{os.Getenv("OMPALLOC_CUDA_LIBRARY")}})
		require.NoError(t, err)
		calls, err := l.Sym("fakecuda_calls")
		require.NoError(t, err)
		lv, err := l.Sym("fakecuda_live")
		require.NoError(t, err)
		driverAllocs = func() int { return int(dlcall.Call(calls, cstr("cuMemAlloc"))) }
		live = func() int { return int(int32(dlcall.Call(lv, 0))) } // 0: device memory
		blocks = live
		if drvPool {
			driverAllocs = func() int { return int(dlcall.Call(calls, cstr("cuMemAllocFromPoolAsync"))) }
			blocks = func() int { return int(int32(dlcall.Call(lv, 5))) } // 5: blocks pools hold
		}
	} else {
		l, err := dl.Open(dl.Spec{Name: "fake HSA runtime", Candidates: []string{os.Getenv("OMPALLOC_HSA_LIBRARY")}})
		require.NoError(t, err)
		count, err := l.Sym("fakehsa_count")
		require.NoError(t, err)
		driverAllocs = func() int { return int(dlcall.Call(count, cstr("alloc_calls"))) }
		live = func() int { return int(dlcall.Call(count, cstr("allocs"))) }
		blocks = live
	}
	// hits is the driver calls a pool hit costs: none for the size-class
	// cache, one cuMemAllocFromPoolAsync for the driver's pool.
	hits := 0
	if drvPool {
		hits = 1
	}
	d.TrimPool(0)
	t.Cleanup(func() { d.TrimPool(0) })
	require.Zero(t, d.MemoryStats().Pool.Reserved)
	const n = 1 << 20

	t.Run("omp_target_alloc twice reuses the block", func(t *testing.T) {
		calls0, blocks0 := driverAllocs(), blocks()
		p := TargetAlloc(n, 0)
		require.NotNil(t, p)
		require.Equal(t, calls0+1, driverAllocs(), "a miss asks the driver")
		st := d.MemoryStats().Pool
		require.Equal(t, drvPool, st.DriverPool)
		require.Equal(t, uintptr(n), st.Reserved)
		require.Equal(t, uintptr(n), st.InUse)
		TargetFree(p, 0)
		st = d.MemoryStats().Pool
		require.Equal(t, uintptr(n), st.Reserved, "the freed block stays reserved")
		require.Zero(t, st.InUse)
		if !drvPool {
			require.Equal(t, 1, st.FreeBlocks)
		}
		require.Equal(t, blocks0+1, blocks(), "omp_target_free kept the block for reuse")

		// The same size class, through llvm_omp_target_alloc_device: the
		// same block, no driver call; and it is usable device memory.
		p2 := TargetAllocDevice(n-100, 0)
		require.Equal(t, p, p2)
		require.Equal(t, calls0+1+hits, driverAllocs(), "a hit asks the driver nothing more")
		require.Equal(t, blocks0+1, blocks())
		if !drvPool {
			require.Equal(t, uint64(1), d.MemoryStats().Pool.Hits)
		}
		require.Equal(t, p2, TargetMemset(p2, 0x3C, n-100, 0))
		h := hostBytes(t, n-100)
		require.Equal(t, 0, TargetMemcpy(unsafe.Pointer(&h[0]), p2, n-100, 0, 0, GetInitialDevice(), 0))
		require.Equal(t, byte(0x3C), h[0])
		require.Equal(t, byte(0x3C), h[n-101])
		TargetFreeDevice(p2, 0)
		p3 := TargetAlloc(n, 0)
		require.Equal(t, p, p3)
		TargetFree(p3, 0)
		require.Equal(t, calls0+1+2*hits, driverAllocs())
		require.Equal(t, blocks0+1, blocks())

		// Trim gives the cached block back to the driver.
		require.Equal(t, uintptr(n), d.TrimPool(0))
		require.Equal(t, blocks0, blocks())
		require.Zero(t, d.MemoryStats().Pool.Reserved)
	})

	// Issue 27 item 6: on a 64 MiB device, 40 MiB allocated and freed, then
	// 48 MiB: the pool gives back what it keeps and retries. Seen failing
	// before the fix (nil, a warning with the driver's out-of-memory error).
	t.Run("out of memory gives the pool's free memory back", func(t *testing.T) {
		d.TrimPool(0)
		p := TargetAllocDevice(40<<20, 0)
		require.NotNil(t, p)
		TargetFreeDevice(p, 0)
		p2 := TargetAllocDevice(48<<20, 0)
		require.NotNil(t, p2, "%+v", d.MemoryStats().Pool)
		TargetFreeDevice(p2, 0)
		d.TrimPool(0)
		require.Zero(t, d.MemoryStats().Pool.Reserved)
	})

	t.Run("omp_target_free of a block the pool did not hand out reaches the driver", func(t *testing.T) {
		live0 := live()
		p, err := d.Alloc(target.MemDevice, 4096)
		require.NoError(t, err)
		require.Equal(t, live0+1, live())
		TargetFree(cmem.Ptr(p), 0)
		require.Equal(t, live0, live(), "freed by the driver")
		_, ok := d.Kind(p)
		require.False(t, ok)
		require.Zero(t, d.MemoryStats().Pool.Reserved)
	})

	t.Run("pool_size on the device memory space", func(t *testing.T) {
		a := InitAllocator(TargetDeviceMemSpace, []AllocTrait{{Key: AtkPoolSize, Value: n}, {Key: AtkFallback, Value: AtvNullFb}})
		require.NotEqual(t, NullAllocator, a)
		defer DestroyAllocator(a)
		calls0 := driverAllocs()
		p := Alloc(n, a)
		require.NotNil(t, p)
		require.Equal(t, uintptr(n), d.MemoryStats().Pool.InUse)
		require.Nil(t, Alloc(1, a), "pool_size is a quota: the allocator's bytes are all handed out")
		Free(p, a)
		require.Zero(t, d.MemoryStats().Pool.InUse)
		p2 := Alloc(n, a)
		require.Equal(t, p, p2, "the device pool's block again")
		require.Equal(t, calls0+1+hits, driverAllocs())
		Free(p2, a)
	})

	if drvPool {
		t.Run("a failing cuMemAllocFromPoolAsync or cuMemFreeAsync", func(t *testing.T) {
			require.NoError(t, os.Setenv("FAKECUDA_FAIL", "cuMemAllocFromPoolAsync=2"))
			t.Cleanup(func() { _ = os.Unsetenv("FAKECUDA_FAIL") })
			d.TrimPool(0)
			blocks0 := blocks()
			_, err := d.PoolAlloc(n, nil)
			require.ErrorContains(t, err, "cuMemAllocFromPoolAsync: CUDA_ERROR_OUT_OF_MEMORY")
			require.Zero(t, d.MemoryStats().Pool.InUse, "nothing counted for the failed allocation")
			require.NoError(t, os.Unsetenv("FAKECUDA_FAIL"))
			p, err := d.PoolAlloc(n, nil)
			require.NoError(t, err)
			// A failing cuMemFreeAsync keeps the block handed out, so that
			// the free can be retried.
			require.NoError(t, os.Setenv("FAKECUDA_FAIL", "cuMemFreeAsync"))
			require.ErrorContains(t, d.PoolFree(p, nil), "cuMemFreeAsync: CUDA_ERROR_UNKNOWN")
			require.Equal(t, uintptr(n), d.MemoryStats().Pool.InUse)
			require.NoError(t, os.Unsetenv("FAKECUDA_FAIL"))
			require.NoError(t, d.PoolFree(p, nil))
			require.Zero(t, d.MemoryStats().Pool.InUse)
			require.Equal(t, blocks0+1, blocks())
		})
	}
}
