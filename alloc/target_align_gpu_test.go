package alloc

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 23, item 9, on the fake GPU drivers: TestTargetMemspaceAlignment
// runs on the host device, whose blocks are page-aligned host memory. A
// GPU's target memory spaces return what its driver returns (the device
// memory space through the device pool: CUDA's stream-ordered pool, or the
// size-class cache on HSA), and the alignment trait must hold there too,
// with PoolUsed never below zero and all of it back after the frees.
func TestTargetMemspaceAlignmentOnFakeGPU(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, c := range []struct {
		name, fake string
		env        []string
	}{
		{"cuda", "fakecuda", []string{"FAKECUDA_DEVICES=1", "OMPALLOC_DISABLE_HSA=1", "OMPALLOC_DISABLE_CUDA="}},
		{"amdgpu", "fakehsa", []string{"FAKEHSA_GPUS=1", "OMPALLOC_DISABLE_CUDA=1", "OMPALLOC_DISABLE_HSA="}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib := fakedrv.Build(t, c.fake)
			cmd := exec.Command(os.Args[0], "-test.run=^TestTargetMemspaceAlignmentGPUChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
			cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=align-gpu", "OMPALLOC_ALIGN_PLUGIN="+c.name,
				"OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_HSA_LIBRARY="+lib, "OMP_DEFAULT_DEVICE=", "FAKECUDA_FAIL=", "FAKEHSA_FAIL=")
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestTargetMemspaceAlignmentGPUChild", "%s", out)
		})
	}
}

func TestTargetMemspaceAlignmentGPUChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "align-gpu" {
		t.Skip("run by TestTargetMemspaceAlignmentOnFakeGPU in a child process")
	}
	d, err := target.Get(target.DefaultDevice())
	require.NoError(t, err)
	require.Equal(t, os.Getenv("OMPALLOC_ALIGN_PLUGIN"), d.Plugin(), "the default device is the fake GPU")
	t.Cleanup(func() { d.TrimPool(0) })
	for _, ms := range []memspace.ID{memspace.TargetHost, memspace.TargetShared, memspace.TargetDevice} {
		for _, pool := range []uintptr{0, 64 << 20} {
			for _, align := range []uintptr{8 << 10, 64 << 10, 2 << 20} {
				t.Run(ms.String()+"/pool="+itoa(pool)+"/align="+itoa(align), func(t *testing.T) {
					opts := []Option{WithAlignment(align), WithFallback(traits.NullFb)}
					if pool > 0 {
						opts = append(opts, WithPoolSize(pool))
					}
					a := mustNew(t, ms, opts...)
					var ps []unsafe.Pointer
					for i := range 16 {
						size := uintptr(1000 + i*4096)
						p, err := a.Alloc(size)
						require.GreaterOrEqual(t, a.Stats().PoolUsed, int64(0), "after block %d (%v)", i, err)
						require.NoError(t, err, "block %d", i)
						require.Zero(t, uintptr(p)%align, "block %d at %p", i, p)
						if ms != memspace.TargetDevice { // host-accessible: all of it is ours
							fill(p, size, byte(i))
						}
						info, err := Inspect(p)
						require.NoError(t, err)
						require.Equal(t, size, info.Size)
						ps = append(ps, p)
					}
					if pool > 0 {
						require.Positive(t, a.Stats().PoolUsed)
						require.LessOrEqual(t, a.Stats().PoolUsed, int64(pool))
					}
					for _, p := range ps {
						require.NoError(t, Free(p))
					}
					require.Zero(t, a.Stats().PoolUsed, "every charge is given back")
					require.Zero(t, a.Stats().BlocksLive)
				})
			}
		}
	}
	require.Zero(t, d.MemoryStats().Pool.InUse, "every device block went back to the pool")
}
