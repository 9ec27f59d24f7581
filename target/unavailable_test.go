package target

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const unavailableChildEnv = "OMPALLOC_TARGET_UNAVAILABLE_CHILD"

// Three fake GPUs, the middle one in compute mode PROHIBITED: the CUDA
// driver cannot make its context, while the others work.
func TestUnavailableDevice(t *testing.T) {
	if os.Getenv(unavailableChildEnv) != "" {
		t.Skip("in the child")
	}
	lib := fakedrv.Build(t, "fakecuda")
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableDeviceChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), unavailableChildEnv+"=1", "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=1",
		"FAKECUDA_DEVICES=3", "FAKECUDA_PROHIBITED=1", "FAKECUDA_FAIL=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestUnavailableDeviceChild", "%s", out)
}

// The prohibited device keeps its number (CUDA ordinals are OpenMP device
// numbers), is described, and fails every use with an error naming it and
// the driver's reason; devices 0 and 2 work, also with each other.
func TestUnavailableDeviceChild(t *testing.T) {
	if os.Getenv(unavailableChildEnv) == "" {
		t.Skip("run by TestUnavailableDevice")
	}
	require.Equal(t, 3, NumDevices())
	refs := func(dev int) int {
		return int(int32(dlcall.Call(hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_ctx_refs"), uintptr(dev))))
	}
	for dev := range 3 {
		require.Zero(t, refs(dev), "discovery made a context on GPU %d", dev)
	}
	for _, s := range Plugins() {
		if s.Plugin == "cuda" {
			require.NoError(t, s.Err, "one unusable GPU does not fail the plugin")
			require.Equal(t, "CUDA_SUCCESS", s.Init)
		}
	}
	bad, err := Get(1)
	require.NoError(t, err)
	require.Equal(t, "Fake CUDA Device 1", bad.Info().Name)
	const want = "device 1: device unavailable: CUDA device 1: open: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN (999)"
	check := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorContains(t, err, want)
	}
	check(bad.Open())
	_, err = bad.Alloc(MemDevice, 64)
	check(err)
	_, err = bad.NewQueue()
	check(err)
	h := hostMem(t, 1<<20)
	_, err = bad.LockMem(h, 4096)
	check(err)
	check(Memcpy(0x1000, h, 64, 1, InitialDevice()))

	d0, err := Get(0)
	require.NoError(t, err)
	p0, err := d0.Alloc(MemDevice, 64)
	require.NoError(t, err)
	require.NoError(t, d0.Free(MemDevice, p0))
	require.Equal(t, 1, refs(0))
	require.Zero(t, refs(2), "using GPU 0 takes nothing on GPU 2")

	var bufs []uintptr
	for _, dev := range []int{0, 2} {
		d, err := Get(dev)
		require.NoError(t, err)
		require.NoError(t, d.Open())
		p, err := d.Alloc(MemDevice, 1<<20)
		require.NoError(t, err)
		defer func() { require.NoError(t, d.Free(MemDevice, p)) }()
		bufs = append(bufs, p)
	}
	fill(h, 1<<20, 77)
	require.NoError(t, Memcpy(bufs[0], h, 1<<20, 0, InitialDevice()))
	require.NoError(t, Memcpy(bufs[1], bufs[0], 1<<20, 2, 0))
	back := hostMem(t, 1<<20)
	require.NoError(t, Memcpy(back, bufs[1], 1<<20, InitialDevice(), 2))
	require.True(t, hasFill(back, 1<<20, 77))
	err = Memcpy(bufs[0], 0x1000, 64, 0, 1)
	require.True(t, errors.Is(err, ErrUnavailable), "a copy from the unusable device: %v", err)
}
