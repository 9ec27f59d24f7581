package target

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/plugin/amdgpu"
)

const noCoarseChildEnv = "OMPALLOC_TARGET_NOCOARSE_CHILD"

// TestAMDWithoutCoarsePool runs its child over the fake HSA runtime with a
// GPU agent that has no allocatable coarse-grained pool (issue 19, item 3):
// the plugin's PeerAccess dereferenced the missing pool and crashed the
// process; such a pair must take the pinned bounce instead.
func TestAMDWithoutCoarsePool(t *testing.T) {
	if os.Getenv(noCoarseChildEnv) != "" {
		t.Skip("in the child")
	}
	hsa := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAMDWithoutCoarsePoolChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), noCoarseChildEnv+"=1", "OMPALLOC_DISABLE_CUDA=1", "OMPALLOC_HSA_LIBRARY="+hsa,
		"OMPALLOC_DISABLE_HSA=", "FAKEHSA_GPUS=2", "FAKEHSA_NO_COARSE_GPUS=1", "FAKEHSA_FAIL=", "FAKEHSA_COPY_DELAY_US=50")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestAMDWithoutCoarsePoolChild", "%s", out)
}

func TestAMDWithoutCoarsePoolChild(t *testing.T) {
	if os.Getenv(noCoarseChildEnv) == "" {
		t.Skip("run by TestAMDWithoutCoarsePool")
	}
	require.Equal(t, 2, NumDevices(), "two AMD GPUs, CUDA off")
	d0, err := Get(0)
	require.NoError(t, err)
	d1, err := Get(1)
	require.NoError(t, err)
	require.Equal(t, "amdgpu", d1.Plugin())
	const n = 5<<20 + 123 // more than one 4 MiB bounce chunk
	v, err := d0.Alloc(MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d0.Free(MemDevice, v)) })
	_, err = d1.Alloc(MemDevice, n)
	require.Error(t, err, "GPU 1 has no VRAM to allocate from")
	_, err = d0.LockMem(v+4096, 4096)
	require.ErrorIs(t, err, amdgpu.ErrDeviceMemory, "llvm_omp_target_lock_mem of VRAM (item 6)")
	// GPU 1's memory: host memory of an HSA pool, allocated through it.
	h1, err := d1.Alloc(MemHost, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d1.Free(MemHost, h1)) })

	src := hostMem(t, n)
	fill(src, n, 19)
	require.NoError(t, Memcpy(v, src, n, 0, InitialDevice()))
	require.NoError(t, Memcpy(h1, v, n, 1, 0), "device 0 to device 1: the pinned bounce")
	back := hostMem(t, n)
	require.NoError(t, Memcpy(back, h1, n, InitialDevice(), 1))
	require.True(t, hasFill(back, n, 19))

	fill(src, n, 20)
	require.NoError(t, Memcpy(h1, src, n, 1, InitialDevice()))
	q, err := d1.NewQueue()
	require.NoError(t, err)
	require.NoError(t, MemcpyAsync(v, h1, n, 0, 1, q), "device 1 to device 0 on a queue of device 1")
	// Events need no VRAM: their markers use a fine-grained pool (issue 27
	// item 10; before, Record failed for want of the coarse-grained pool).
	ev, err := d1.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, ev.Record(q), "an event on a GPU without coarse-grained memory")
	require.NoError(t, ev.Synchronize(context.Background()))
	require.NoError(t, ev.Close())
	require.NoError(t, q.Synchronize(context.Background()))
	require.NoError(t, q.Close())
	clearMem(back, n)
	require.NoError(t, Memcpy(back, v, n, InitialDevice(), 0))
	require.True(t, hasFill(back, n, 20))
}
