package alloc

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// TestTrimOnePoolFakeDriver runs TestTrimOnePoolChild in a child process
// with a fake GPU beside the host, once with the fake CUDA driver and once
// with the fake HSA one, so that two pinned pools exist: the host's (mlock:
// VmLck) and the GPU's (cuMemHostRegister or hsa_amd_memory_lock of the
// fake, which locks nothing the kernel counts).
func TestTrimOnePoolFakeDriver(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, c := range []struct{ name, fake string }{
		{"cuda", "fakecuda"},
		{"amdgpu", "fakehsa"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib := fakedrv.Build(t, c.fake)
			cmd := exec.Command(os.Args[0], "-test.run=^TestTrimOnePoolChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
			cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=trimpool", "OMPALLOC_TRIMPOOL_PLUGIN="+c.name)
			if c.name == "cuda" {
				cmd.Env = append(cmd.Env, "OMPALLOC_CUDA_LIBRARY="+lib, "FAKECUDA_DEVICES=1", "OMPALLOC_DISABLE_HSA=1")
			} else {
				cmd.Env = append(cmd.Env, "OMPALLOC_HSA_LIBRARY="+lib, "FAKEHSA_GPUS=1", "OMPALLOC_DISABLE_CUDA=1")
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestTrimOnePoolChild", "%s", out)
		})
	}
}

// Trimming one pool (TrimPinnedPool of a device, or TrimSharedPool of an
// allocator) gives back that pool's cached chunks and regions only: the
// other pool keeps its chunks, its free blocks and, for the host's, its
// VmLck; and after each trim the kernel's VmLck is what the host pool's
// statistics say it locked. Two allocators of one device share its pool,
// so trimming through one gives back what the other cached: the name says
// so.
func TestTrimOnePoolChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "trimpool" {
		t.Skip("run by TestTrimOnePoolFakeDriver")
	}
	plug := os.Getenv("OMPALLOC_TRIMPOOL_PLUGIN")
	var gpu *target.Device
	for _, d := range target.Devices() {
		if d.Plugin() == plug {
			gpu = d
		}
	}
	require.NotNil(t, gpu, "the fake %s device", plug)
	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	vm0 := vmLckKiB(t)
	// registered counts the fake driver's live registrations (CUDA) or
	// locks (HSA) of host memory: the GPU pool's chunks.
	var registered func() int
	if plug == "cuda" {
		l, err := dl.Open(dl.Spec{Name: "fake driver", Candidates: []string{os.Getenv("OMPALLOC_CUDA_LIBRARY")}})
		require.NoError(t, err)
		live, err := l.Sym("fakecuda_live")
		require.NoError(t, err)
		registered = func() int { return int(int32(dlcall.Call(live, 3))) }
	} else {
		l, err := dl.Open(dl.Spec{Name: "fake driver", Candidates: []string{os.Getenv("OMPALLOC_HSA_LIBRARY")}})
		require.NoError(t, err)
		count, err := l.Sym("fakehsa_count")
		require.NoError(t, err)
		what := append([]byte("locks"), 0)
		registered = func() int {
			n := int(int64(dlcall.Call(count, uintptr(unsafe.Pointer(&what[0])))))
			runtime.KeepAlive(what)
			return n
		}
	}

	newPinned := func(dev int) *Allocator {
		a, err := New(memspace.Default, WithPinned(true), WithPinDevice(dev), WithFallback(traits.NullFb))
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Destroy() })
		return a
	}
	onHost, onHost2, onGPU := newPinned(host.ID), newPinned(host.ID), newPinned(gpu.ID)
	// cache fills a's pool with freed blocks: chunks of medium blocks and
	// a huge region, all kept locked for reuse while a lives.
	cache := func(a *Allocator) {
		var ps []unsafe.Pointer
		for _, n := range []uintptr{1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 3 << 20} {
			p, err := a.Alloc(n)
			if err != nil {
				t.Skipf("cannot pin %d bytes here: %v", n, err)
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			require.NoError(t, Free(p))
		}
	}
	pool := func(dev int) PoolStats {
		st, ok := PinnedPool(dev)
		require.True(t, ok, "device %d has a pinned pool", dev)
		return st
	}
	// agree: VmLck above the baseline is what the host pool locked (the
	// fake GPU's pool locks nothing the kernel counts).
	agree := func(what string) {
		st := pool(host.ID)
		require.Equal(t, int((st.Locked-st.HugeTLB)>>10), vmLckKiB(t)-vm0, "%s: VmLck is the host pool's Locked", what)
	}
	keep, err := onHost.Alloc(64) // a live block: the host pool keeps its chunk
	require.NoError(t, err)
	defer func() { require.NoError(t, Free(keep)) }()

	cache(onHost2)
	cache(onGPU)
	h0, g0 := pool(host.ID), pool(gpu.ID)
	require.NotZero(t, h0.Idle, "the host pool caches freed memory")
	require.NotZero(t, g0.Idle, "the GPU pool caches freed memory")
	require.Positive(t, h0.FreeBlocks)
	require.Positive(t, g0.FreeBlocks)
	regs := registered()
	require.Positive(t, regs, "the GPU pool's chunks are registered with the fake")
	agree("cached")
	st, ok := onHost.SharedPool()
	require.True(t, ok)
	require.Equal(t, h0.FreeBlocks, st.FreeBlocks, "an allocator's shared pool is its device's")
	_, ok = mustNew(t, memspace.Default).SharedPool()
	require.False(t, ok, "a host allocator draws on no pinned pool")

	// The GPU's pool alone.
	released := TrimPinnedPool(gpu.ID)
	require.GreaterOrEqual(t, released, g0.Idle)
	g1 := pool(gpu.ID)
	require.Zero(t, g1.Idle)
	require.Zero(t, g1.FreeBlocks)
	require.Zero(t, g1.Locked, "no live block: nothing stays locked")
	require.Less(t, registered(), regs, "the GPU pool's chunks were unregistered")
	h1 := pool(host.ID)
	require.Equal(t, h0.Locked, h1.Locked, "the host pool kept its chunks")
	require.Equal(t, h0.FreeBlocks, h1.FreeBlocks)
	require.Equal(t, h0.Idle, h1.Idle)
	agree("GPU pool trimmed")

	// The host pool through one of its allocators: what the other one
	// cached goes too (the pool is shared), the GPU's stays.
	cache(onGPU)
	g2 := pool(gpu.ID)
	regs = registered()
	require.NotZero(t, g2.Idle)
	released = onHost.TrimSharedPool()
	require.GreaterOrEqual(t, released, h1.Idle, "onHost2's cached memory went through onHost's pool")
	h2 := pool(host.ID)
	require.Zero(t, h2.FreeBlocks)
	require.Less(t, h2.Locked, h1.Locked)
	require.NotZero(t, h2.Locked, "the chunk of the live block stays")
	g3 := pool(gpu.ID)
	require.Equal(t, g2.Locked, g3.Locked, "the GPU pool kept its chunks")
	require.Equal(t, g2.FreeBlocks, g3.FreeBlocks)
	require.Equal(t, regs, registered(), "and their registrations")
	agree("host pool trimmed")

	require.GreaterOrEqual(t, onGPU.TrimSharedPool(), g3.Idle, "Idle is a lower bound (per-P caches)")
	require.Zero(t, pool(gpu.ID).Locked)
	agree("both trimmed")
}
