package reliability

import (
	"context"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// fakeCUDA is the fake libcuda loaded in a child, with its test hooks.
type fakeCUDA struct{ live, calls uintptr }

// Kinds of fakecuda_live.
const (
	cuLiveDevice = iota
	cuLiveManaged
	cuLiveHostAlloc
	cuLiveRegistered
	cuLiveStreams
)

func openFakeCUDA(t *testing.T) fakeCUDA {
	t.Helper()
	path := os.Getenv("OMPALLOC_CUDA_LIBRARY")
	require.NotEmpty(t, path)
	lib, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{path}})
	require.NoError(t, err)
	var f fakeCUDA
	f.live, err = lib.Sym("fakecuda_live")
	require.NoError(t, err)
	f.calls, err = lib.Sym("fakecuda_calls")
	require.NoError(t, err)
	return f
}

func (f fakeCUDA) count(kind int) int { return int(int32(dlcall.Call(f.live, uintptr(kind)))) }

// driverState is the fake driver's live objects, staging buffers and the
// idle streams of synchronous copies (which the devices keep on purpose)
// apart.
func (f fakeCUDA) driverState() [5]int {
	var s [5]int
	for k := range s {
		s[k] = f.count(k)
	}
	for _, d := range target.Devices() {
		if d.Plugin() == "cuda" {
			s[cuLiveHostAlloc] -= d.StagingStats().Buffers
			if cd, err := device.Get(d.ID); err == nil {
				if k, ok := cd.Impl().(interface{ SyncStreams() int }); ok {
					s[cuLiveStreams] -= k.SyncStreams()
				}
			}
		}
	}
	return s
}

// injectCUDA makes the fake fail the calls in spec (FAKECUDA_FAIL syntax)
// until the returned function runs. The fake reads the variable at every
// call; purego's runtime passes os.Setenv on to the C environment.
func injectCUDA(t *testing.T, spec string) func() {
	t.Helper()
	require.NoError(t, os.Setenv("FAKECUDA_FAIL", spec))
	undo := func() { _ = os.Unsetenv("FAKECUDA_FAIL") }
	t.Cleanup(undo) // also when the test stops early
	return undo
}

func fakeCUDAEnv(t *testing.T) []string {
	lib := fakedrv.Build(t, "fakecuda")
	// An older driver without memory pools (FAKECUDA_NO_MEMPOOLS): the
	// device pool is the size-class cache over cuMemAlloc_v2, whose
	// failures the "cuMemAlloc" step injects; a failing
	// cuMemAllocFromPoolAsync is kmp's TestTargetAllocPoolOnFakeGPU's.
	// Two devices whatever the parent's environment says.
	return []string{"OMPALLOC_CUDA_LIBRARY=" + lib, "OMPALLOC_DISABLE_HSA=1", "FAKECUDA_FAIL=", "OMPALLOC_DISABLE_CUDA=", "FAKECUDA_NO_MEMPOOLS=1", "FAKECUDA_DEVICES=2"}
}

// Driver calls of the fake CUDA driver fail one at a time; after each the
// fallback trait was obeyed, nothing leaked (blocks, pinned bytes, registry
// entries, staging buffers, VmLck, and the driver's own allocations,
// registrations and streams) and the next operations succeed.
func TestCUDADriverFaults(t *testing.T) {
	runChild(t, "TestCUDADriverFaultsChild", fakeCUDAEnv(t)...)
}

func TestCUDADriverFaultsChild(t *testing.T) {
	inChild(t)
	fk := openFakeCUDA(t)
	require.Equal(t, 2, target.NumDevices(), "two fake CUDA devices, then the host")
	d0, err := target.Get(0)
	require.NoError(t, err)
	require.Equal(t, "cuda", d0.Plugin())
	require.Equal(t, 0, target.DefaultDevice())
	host := target.InitialDevice()
	faults := 0

	// step runs one scenario and checks that nothing leaked.
	step := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			base, drv := snapshot(), fk.driverState()
			f(t)
			requireSame(t, base, name)
			require.Equal(t, drv, fk.driverState(), "%s: the driver's objects back to baseline", name)
		})
	}

	step("cuMemHostRegister/pinned allocators", func(t *testing.T) {
		for _, fb := range []traits.Value{traits.NullFb, traits.DefaultMemFb, traits.AbortFb, traits.AllocatorFb} {
			plain, err := alloc.New(memspace.Default)
			require.NoError(t, err)
			opts := []alloc.Option{alloc.WithPinned(true)}
			if fb == traits.AllocatorFb {
				opts = append(opts, alloc.WithFallbackAllocator(plain))
			} else {
				opts = append(opts, alloc.WithFallback(fb))
			}
			a, err := alloc.New(memspace.Default, opts...)
			require.NoError(t, err)
			alloc.Trim()
			undo := injectCUDA(t, "cuMemHostRegister")
			if fb == traits.NullFb {
				// kmp: nil and, as in libomp, no warning for a failed allocation.
				silent(t, func() { require.Nil(t, kmp.Alloc(4096, kmp.AllocatorHandle(ompglue.Handle(a)))) })
				faults++
			}
			var p unsafe.Pointer
			msg := func() (msg any) {
				defer func() { msg = recover() }()
				p, err = a.Alloc(4096)
				return nil
			}()
			undo()
			faults++
			switch fb {
			case traits.NullFb:
				require.Nil(t, p)
				require.ErrorIs(t, err, alloc.ErrPinFailed)
				require.ErrorContains(t, err, "cuMemHostRegister")
			case traits.AbortFb:
				require.NotNil(t, msg)
				require.Contains(t, msg, "abort_fb")
				require.Contains(t, msg, "cuMemHostRegister")
			case traits.DefaultMemFb, traits.AllocatorFb:
				require.NoError(t, err)
				pattern(bytesAt(p, 4096), 1)
				require.False(t, registered(d0.Registry(), uintptr(p)), "fallback memory is not pinned")
				o, err := allocOwner(p)
				require.NoError(t, err)
				if fb == traits.AllocatorFb {
					require.Same(t, plain, o)
				} else {
					require.Same(t, alloc.Default(), o)
				}
				require.NoError(t, alloc.Free(p))
			}
			require.Zero(t, d0.Registry().Stats().Entries, "no entry left by the failed pin")
			// The next allocation is pinned through the driver.
			q, err := a.Alloc(4096)
			require.NoError(t, err)
			require.True(t, registered(d0.Registry(), uintptr(q)))
			require.NoError(t, alloc.Free(q))
			require.NoError(t, a.Destroy())
			require.NoError(t, plain.Destroy())
		}
	})

	step("cuMemHostRegister/LockMem", func(t *testing.T) {
		buf := hostBuf(t, 1<<20)
		undo := injectCUDA(t, "cuMemHostRegister=2")
		_, err := d0.LockMem(buf, 1<<20)
		undo()
		faults++
		require.ErrorContains(t, err, "CUDA_ERROR_OUT_OF_MEMORY")
		require.Zero(t, d0.Registry().Stats().Entries)
		dev, err := d0.LockMem(buf, 1<<20)
		require.NoError(t, err)
		require.NotZero(t, dev)
		require.NoError(t, d0.UnlockMem(buf))
	})

	step("cuMemAlloc", func(t *testing.T) {
		// omp_target_alloc and the device memspace are served from the
		// device's caching pool: emptied first, every allocation below is
		// a miss that reaches the (failing) driver.
		d0.TrimPool(0)
		require.Zero(t, d0.MemoryStats().Pool.Reserved)
		undo := injectCUDA(t, "cuMemAlloc")
		_, err := d0.Alloc(plugin.MemDevice, 1<<20)
		require.ErrorContains(t, err, "cuMemAlloc")
		ta, ok := ompglue.Lookup(uintptr(kmp.TargetDeviceMemAlloc))
		require.True(t, ok)
		p, err := ta.Alloc(1 << 20)
		require.Nil(t, p)
		require.Error(t, err)
		warnsOnce(t, func() { require.Nil(t, kmp.TargetAlloc(1<<20, 0)) }, "omp_target_alloc", "cuMemAlloc")
		// The driver's refusal is not an out-of-memory the fallback trait
		// explains away: kmp says why, once.
		warnsOnce(t, func() { require.Nil(t, kmp.Alloc(1<<20, kmp.TargetDeviceMemAlloc)) }, "omp_alloc", "cuMemAlloc")
		undo()
		faults += 4
		require.Zero(t, d0.MemoryStats().Pool.Reserved, "failed misses reserve nothing")
		p, err = ta.Alloc(1 << 20)
		require.NoError(t, err)
		require.NotNil(t, p)
		require.NoError(t, alloc.Free(p))
		// The block went back to the pool, not the driver; trimming the
		// pool gives it back (the baseline check below counts the driver's
		// allocations).
		require.Equal(t, 1, d0.MemoryStats().Pool.FreeBlocks)
		require.Equal(t, uintptr(1<<20), d0.TrimPool(0))
	})

	step("cuMemHostAlloc/staging falls back to an unstaged copy", func(t *testing.T) {
		dst, err := d0.Alloc(plugin.MemDevice, 4096)
		require.NoError(t, err)
		q, err := d0.NewQueue()
		require.NoError(t, err)
		src := hostBuf(t, 4096)
		pattern(bytesAt(cmem.Ptr(src), 4096), 7)
		before := d0.StagingStats()
		staging := d0.StagingConfig()
		d0.SetStagingConfig(target.StagingConfig{Threshold: 64 << 10, MaxPoolBytes: 0}) // no free buffer to hit
		undo := injectCUDA(t, "cuMemHostAlloc")
		_, err = d0.Alloc(plugin.MemHost, 4096)
		require.ErrorContains(t, err, "cuMemHostAlloc")
		require.NoError(t, target.MemcpyAsync(dst, src, 4096, d0.ID, target.InitialDevice(), q), "staging is optional: the copy goes unstaged")
		undo()
		faults += 2
		require.NoError(t, q.Synchronize(context.Background()))
		after := d0.StagingStats()
		require.Equal(t, before.AllocFailures+1, after.AllocFailures)
		require.Equal(t, before.Unstaged+1, after.Unstaged)
		back := hostBuf(t, 4096)
		require.NoError(t, target.Memcpy(back, dst, 4096, host, 0))
		require.True(t, holds(bytesAt(cmem.Ptr(back), 4096), 7), "the data arrived")
		require.NoError(t, q.Close())
		require.NoError(t, d0.Free(plugin.MemDevice, dst))
		d0.SetStagingConfig(staging)
	})

	step("cuMemcpyHtoDAsync/staged and unstaged submits", func(t *testing.T) {
		dst, err := d0.Alloc(plugin.MemDevice, 1<<20)
		require.NoError(t, err)
		q, err := d0.NewQueue()
		require.NoError(t, err)
		src := hostBuf(t, 1<<20)
		pattern(bytesAt(cmem.Ptr(src), 1<<20), 9)
		undo := injectCUDA(t, "cuMemcpyHtoDAsync")
		require.ErrorContains(t, target.MemcpyAsync(dst, src, 4096, d0.ID, target.InitialDevice(), q), "cuMemcpyHtoDAsync")  // staged
		require.ErrorContains(t, target.MemcpyAsync(dst, src, 1<<20, d0.ID, target.InitialDevice(), q), "cuMemcpyHtoDAsync") // pageable
		undo()
		faults += 2
		require.Zero(t, d0.StagingStats().InUseBytes, "the staging buffer went back to the pool")
		require.NoError(t, target.MemcpyAsync(dst, src, 4096, d0.ID, target.InitialDevice(), q))
		require.NoError(t, target.MemcpyAsync(dst+4096, src+4096, 1<<20-4096, d0.ID, target.InitialDevice(), q))
		require.NoError(t, q.Synchronize(context.Background()))
		back := hostBuf(t, 1<<20)
		require.NoError(t, target.Memcpy(back, dst, 1<<20, host, 0))
		require.True(t, holds(bytesAt(cmem.Ptr(back), 1<<20), 9))
		require.NoError(t, q.Close())
		require.NoError(t, d0.Free(plugin.MemDevice, dst))
	})

	step("cuMemcpyHtoDAsync and cuMemcpyDtoHAsync of synchronous copies/Memcpy", func(t *testing.T) {
		dst, err := d0.Alloc(plugin.MemDevice, 8192)
		require.NoError(t, err)
		src, back := hostBuf(t, 8192), hostBuf(t, 8192)
		pattern(bytesAt(cmem.Ptr(src), 8192), 3)
		undo := injectCUDA(t, "cuMemcpyHtoDAsync")
		require.ErrorContains(t, target.Memcpy(dst, src, 8192, 0, host), "cuMemcpyHtoD")
		warnsOnce(t, func() {
			require.Equal(t, -1, kmp.TargetMemcpy(cmem.Ptr(dst), cmem.Ptr(src), 8192, 0, 0, 0, host))
		}, "omp_target_memcpy", "cuMemcpyHtoD")
		faults++
		undo()
		require.NoError(t, target.Memcpy(dst, src, 8192, 0, host))
		undo = injectCUDA(t, "cuMemcpyDtoHAsync")
		require.ErrorContains(t, target.Memcpy(back, dst, 8192, host, 0), "cuMemcpyDtoH")
		undo()
		faults += 2
		require.NoError(t, target.Memcpy(back, dst, 8192, host, 0))
		require.True(t, holds(bytesAt(cmem.Ptr(back), 8192), 3))
		require.NoError(t, d0.Free(plugin.MemDevice, dst))
	})

	step("cuStreamCreate", func(t *testing.T) {
		undo := injectCUDA(t, "cuStreamCreate")
		_, err := d0.NewQueue()
		undo()
		faults++
		require.ErrorContains(t, err, "cuStreamCreate")
		q, err := d0.NewQueue()
		require.NoError(t, err)
		require.NoError(t, q.Close())
	})

	step("cuStreamSynchronize", func(t *testing.T) {
		dst, err := d0.Alloc(plugin.MemDevice, 4096)
		require.NoError(t, err)
		q, err := d0.NewQueue()
		require.NoError(t, err)
		src := hostBuf(t, 4096)
		pattern(bytesAt(cmem.Ptr(src), 4096), 5)
		require.NoError(t, target.MemcpyAsync(dst, src, 4096, d0.ID, target.InitialDevice(), q))
		undo := injectCUDA(t, "cuStreamSynchronize")
		require.ErrorContains(t, q.Synchronize(context.Background()), "cuStreamSynchronize")
		undo()
		faults++
		require.NoError(t, q.Synchronize(context.Background()))
		require.Zero(t, d0.StagingStats().InUseBytes)
		back := hostBuf(t, 4096)
		require.NoError(t, target.Memcpy(back, dst, 4096, host, 0))
		require.True(t, holds(bytesAt(cmem.Ptr(back), 4096), 5))
		require.NoError(t, q.Close())
		require.NoError(t, d0.Free(plugin.MemDevice, dst))
	})

	step("cuMemFree", func(t *testing.T) {
		p, err := d0.Alloc(plugin.MemDevice, 4096)
		require.NoError(t, err)
		undo := injectCUDA(t, "cuMemFree")
		err = d0.Free(plugin.MemDevice, p)
		undo()
		faults++
		require.ErrorContains(t, err, "cuMemFree")
		require.NoError(t, d0.Free(plugin.MemDevice, p), "a failed free can be retried")
	})

	step("cuMemHostUnregister", func(t *testing.T) {
		buf := hostBuf(t, 1<<20)
		_, err := d0.LockMem(buf, 1<<20)
		require.NoError(t, err)
		undo := injectCUDA(t, "cuMemHostUnregister")
		err = d0.UnlockMem(buf)
		undo()
		faults++
		require.ErrorContains(t, err, "cuMemHostUnregister")
		require.False(t, registered(d0.Registry(), buf))
		require.Equal(t, 1, fk.count(cuLiveRegistered), "the driver still holds the registration")
		// The range can be locked again: the kept registration is reused,
		// not taken for one made outside the runtime; the next unlock
		// really unregisters it.
		_, err = d0.LockMem(buf, 1<<20)
		require.NoError(t, err)
		e, ok := d0.Registry().Entry(buf)
		require.True(t, ok)
		require.False(t, e.External, "%+v", e)
		require.NoError(t, d0.UnlockMem(buf))
		require.Zero(t, fk.count(cuLiveRegistered))
	})

	reportFaults(faults)
	t.Logf("CUDA driver faults injected and survived: %d", faults)
}

// A driver whose cuInit fails contributes no devices; the host carries on
// as device 0 and pinned memory is locked there.
func TestCUDAInitFault(t *testing.T) {
	env := append(fakeCUDAEnv(t), "FAKECUDA_FAIL=cuInit=100")
	runChild(t, "TestCUDAInitFaultChild", env...)
}

func TestCUDAInitFaultChild(t *testing.T) {
	inChild(t)
	base := snapshot()
	require.Zero(t, target.NumDevices())
	st := target.Plugins()[0]
	require.Equal(t, "cuda", st.Plugin)
	require.Error(t, st.Err)
	require.Contains(t, st.Init, "CUDA_ERROR_NO_DEVICE")
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	p, err := a.Alloc(1000)
	require.NoError(t, err)
	d, err := target.Get(0)
	require.NoError(t, err)
	require.True(t, d.IsHost())
	require.True(t, registered(d.Registry(), uintptr(p)))
	require.NoError(t, alloc.Free(p))
	require.NoError(t, a.Destroy())
	requireSame(t, base, "cuInit failed")
	reportFaults(1)
}
