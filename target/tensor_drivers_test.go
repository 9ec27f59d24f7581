package target

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/loader"
	"github.com/ompalloc/ompalloc/target/plugin"
)

const tensorChildEnv = "OMPALLOC_TARGET_TENSOR_CHILD"

// TestTensorFakeDrivers runs TestTensorFakeDriversChild in a child process
// whose CUDA and HSA plugins load the fake C drivers (devices 0 and 1 are
// CUDA, 2 and 3 AMD, 4 the host; copies performed late by driver threads):
// pinning Go memory, typed copies, events and pools against both.
func TestTensorFakeDrivers(t *testing.T) {
	if os.Getenv(tensorChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTensorFakeDriversChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(),
		tensorChildEnv+"=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=300",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=2", "FAKEHSA_COPY_DELAY_US=300",
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestTensorFakeDriversChild", "%s", out)
	t.Logf("%s", out)
}

func TestTensorFakeDriversChild(t *testing.T) {
	if os.Getenv(tensorChildEnv) == "" {
		t.Skip("run by TestTensorFakeDrivers")
	}
	require.Equal(t, 4, NumDevices())
	for _, s := range Plugins() {
		require.NoError(t, s.Err, "%s: %s", s.Plugin, s.Init)
	}
	t.Run("pin", tensorPin)
}

// tensorPin pins Go heap slices for one GPU of each vendor and for all of
// them; copies from the pinned slice take the one-step pinned path, and
// IsPinned sees a lock made behind ompalloc's back through the driver.
func tensorPin(t *testing.T) {
	xs := make([]float32, 1<<18) // 1 MiB
	for i := range xs {
		xs[i] = float32(i)
	}
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		require.False(t, IsPinned(xs))
		h, err := Pin(xs, dev)
		require.NoError(t, err, "%v", d)
		require.True(t, IsPinned(xs), "%v", d)
		require.True(t, d.pinned(uintptr(unsafe.Pointer(&xs[0])), 1<<20))

		// A queued copy reads the pinned Go memory late, with no staging.
		buf, err := AllocArray[float32](d, plugin.MemDevice, len(xs))
		require.NoError(t, err)
		q, err := d.NewQueue()
		require.NoError(t, err)
		staged := d.StagingStats().Misses + d.StagingStats().Hits
		require.NoError(t, CopyToDevice(buf, xs, q))
		require.NoError(t, q.Synchronize())
		require.Equal(t, staged, d.StagingStats().Misses+d.StagingStats().Hits, "no staging for pinned memory")
		back := make([]float32, len(xs))
		require.NoError(t, CopyFromDevice(back, buf, nil))
		require.Equal(t, xs, back)
		require.NoError(t, q.Close())
		require.NoError(t, buf.Free())

		require.NoError(t, h.Unpin())
		require.False(t, IsPinned(xs), "%v", d)
		require.Zero(t, d.Registry().Len())
	}

	h, err := Pin(xs, AllDevices)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3}, h.Devices())
	for dev := range 4 {
		d, _ := Get(dev)
		require.True(t, d.pinned(uintptr(unsafe.Pointer(&xs[0])), 1<<20), "device %d", dev)
	}
	require.NoError(t, h.Close())
	for dev := range 4 {
		d, _ := Get(dev)
		require.Zero(t, d.Registry().Len(), "device %d", dev)
	}

	// Locked behind ompalloc's back (hsa_amd_memory_lock for all agents):
	// no registry knows it, the driver does.
	ys := make([]byte, 1<<16)
	lock := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "hsa_amd_memory_lock")
	unlock := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "hsa_amd_memory_unlock")
	var agentPtr uintptr
	require.Zero(t, loader.Call(lock, uintptr(unsafe.Pointer(&ys[0])), uintptr(len(ys)), 0, 0, uintptr(unsafe.Pointer(&agentPtr))))
	require.True(t, IsPinned(ys), "the driver's pointer info says locked")
	require.Zero(t, loader.Call(unlock, uintptr(unsafe.Pointer(&ys[0]))))
	require.False(t, IsPinned(ys))
}
