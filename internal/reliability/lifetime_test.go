package reliability

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// The runtime never installs a signal handler: every signal's disposition
// (read from the kernel), Go's signal.Ignored and the caught/ignored masks
// are the same before and after using everything, with both fake GPU
// drivers loaded, in a fresh process. The child also shows that nothing
// exits: it must return to the test framework and pass.
func TestNoSignalHandlersNoExit(t *testing.T) {
	cuda := fakedrv.Build(t, "fakecuda")
	hsa := fakedrv.Build(t, "fakehsa")
	runChild(t, "TestNoSignalHandlersNoExitChild", "OMPALLOC_CUDA_LIBRARY="+cuda, "OMPALLOC_HSA_LIBRARY="+hsa,
		"OMPALLOC_DISABLE_CUDA=", "OMPALLOC_DISABLE_HSA=", "FAKECUDA_DEVICES=1", "FAKEHSA_GPUS=1", "FAKEHSA_COPY_DELAY_US=50")
}

func TestNoSignalHandlersNoExitChild(t *testing.T) {
	inChild(t)
	requireSameDispositions(t, func() { useEverything(t) })
}

// useEverything drives every public entry point once: allocators of every
// kind, pinned memory on each device, locks, target memory, transfers,
// queues with staging, bad input, the fault of an abort_fb allocator, and
// shutdown.
func useEverything(t *testing.T) {
	t.Helper()
	require.Equal(t, 2, target.NumDevices(), "one fake CUDA and one fake HSA device")
	for _, h := range []kmp.AllocatorHandle{kmp.DefaultMemAlloc, kmp.LargeCapMemAlloc, kmp.ConstMemAlloc, kmp.HighBwMemAlloc,
		kmp.LowLatMemAlloc, kmp.CgroupMemAlloc, kmp.PteamMemAlloc, kmp.ThreadMemAlloc, kmp.TargetHostMemAlloc,
		kmp.TargetSharedMemAlloc, kmp.TargetDeviceMemAlloc} {
		p := kmp.Alloc(1000, h)
		kmp.Free(p, h)
	}
	for dev := range target.NumDevices() + 1 {
		a := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{{Key: kmp.AtkPinned, Value: kmp.AtvTrue},
			{Key: kmp.AtkPinDevice, Value: uintptr(dev)}, {Key: kmp.AtkAlignment, Value: 128}})
		require.NotEqual(t, kmp.NullAllocator, a)
		p := kmp.Calloc(100, 100, a)
		require.NotNil(t, p)
		p = kmp.Realloc(p, 1<<20, a, a)
		buf := kmp.Alloc(1<<16, kmp.DefaultMemAlloc)
		require.NotNil(t, kmp.TargetLockMem(buf, 1<<16, dev))
		kmp.TargetUnlockMem(buf, dev)
		d := kmp.TargetAlloc(1<<16, dev)
		require.NotNil(t, d)
		require.Zero(t, kmp.TargetMemcpy(d, p, 1<<16, 0, 0, dev, kmp.GetInitialDevice()))
		require.Zero(t, kmp.TargetMemcpy(buf, d, 1<<16, 0, 0, kmp.GetInitialDevice(), dev))
		h := kmp.TargetAllocHost(4096, dev)
		kmp.TargetFreeHost(h, dev)
		kmp.TargetFree(d, dev)
		dv, err := target.Get(dev)
		require.NoError(t, err)
		q, err := dv.NewQueue()
		require.NoError(t, err)
		if !dv.IsHost() {
			dd, err := dv.Alloc(plugin.MemDevice, 4096)
			require.NoError(t, err)
			require.NoError(t, target.MemcpyAsync(dd, uintptr(buf), 100, dv.ID, target.InitialDevice(), q)) // staged
			require.NoError(t, q.Synchronize(context.Background()))
			require.NoError(t, dv.Free(plugin.MemDevice, dd))
		}
		require.NoError(t, q.Close())
		kmp.Free(buf, kmp.NullAllocator)
		kmp.Free(p, kmp.NullAllocator)
		kmp.DestroyAllocator(a)
	}
	ab, err := alloc.New(memspace.Default, alloc.WithPoolSize(4096), alloc.WithFallback(traits.AbortFb))
	require.NoError(t, err)
	require.Panics(t, func() { _, _ = ab.Alloc(1 << 20) }, "abort_fb is a Go panic the program may recover")
	require.NoError(t, ab.Destroy())
	kmp.Free(cmem.Ptr(12345*16), kmp.DefaultMemAlloc)                   // bad input: a warning
	kmp.TargetUnlockMem(unsafe.Pointer(&struct{ x [64]byte }{}), 1<<20) // bad device: a warning
	alloc.Trim()
	require.NoError(t, target.Shutdown())
	require.Equal(t, 2, target.NumDevices(), "discovery again after Shutdown")
}
