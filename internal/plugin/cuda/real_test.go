package cuda

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// realEnv names the real libcuda.so.1 for the integration test;
// scripts/provision-drivers.sh unpacks Debian's and prints the variable.
const realEnv = "OMPALLOC_REAL_CUDA"

// TestRealDriver runs the plugin over the REAL NVIDIA driver library, in a
// child process so that the fake loaded here stays out of its way. Without a
// GPU, Init must fail by name with CUDA_ERROR_NO_DEVICE and leave zero
// devices; with one, the devices must work.
func TestRealDriver(t *testing.T) {
	path := os.Getenv(realEnv)
	if path == "" {
		t.Skip(realEnv + " is not set: point it at a real libcuda.so.1 (eval \"$(scripts/provision-drivers.sh)\" unpacks Debian's)")
	}
	_, err := os.Stat(path)
	require.NoError(t, err, "%s=%s", realEnv, path)
	if err := fakedrv.CheckArch(path); err != nil {
		t.Skipf("%s=%s: %v (scripts/provision-drivers.sh DIR arm64 unpacks the arm64 driver)", realEnv, path, err)
	}
	out := runChild(t, "TestRealDriverChild", "OMPALLOC_CUDA_LIBRARY="+path, "OMPALLOC_DISABLE_CUDA=")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "real_test.go") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// gpuPresent reports whether the machine has NVIDIA device nodes.
func gpuPresent() bool {
	_, err := os.Stat("/dev/nvidiactl")
	return err == nil
}

func TestRealDriverChild(t *testing.T) {
	inChild(t)
	drv, err := defaultDriver.get()
	require.NoError(t, err, "binding the real driver")
	// Bound exactly where the library exports the symbol: an optional one
	// may be absent (the fake driver of the GPU bundle's dry run has no
	// cuCtxCreate_v2); that Debian's libcuda exports every one is
	// TestSymbolsExistInRealDriver's question.
	for _, e := range drv.table() {
		p, err := drv.lib.Sym(boundName(e))
		if err != nil {
			require.True(t, e.Optional, "%s is required and not exported: %v", boundName(e), err)
			require.Zero(t, *e.Addr, "%s bound though the library lacks it", boundName(e))
			t.Logf("optional %s absent from %s", boundName(e), drv.lib.Path)
			continue
		}
		require.Equal(t, p, *e.Addr, "%s bound to another entry point", e.Name)
	}
	ver, err := drv.version()
	require.NoError(t, err)
	require.Regexp(t, `^\d+\.\d+$`, ver)
	require.Equal(t, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", drv.errorName(712), "the driver names codes")

	p := New()
	err = p.Init()
	st := p.Status()
	t.Logf("real driver %s: version %s, cuInit %s, %d devices", st.Library, st.Version, st.Init, len(p.Devices()))
	require.Equal(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), st.Library)
	require.Equal(t, ver, st.Version)
	if err != nil {
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "cuInit", e.Call)
		require.True(t, strings.HasPrefix(e.Name, "CUDA_ERROR_"), "named by the driver: %q", e.Name)
		require.Equal(t, e.Name, st.Init)
		require.Contains(t, err.Error(), "cuInit: "+e.Name)
		if !gpuPresent() {
			require.ErrorIs(t, err, ErrNoDevice)
			require.Equal(t, "CUDA_ERROR_NO_DEVICE", st.Init)
		}
		require.Empty(t, p.Devices())
		return
	}
	require.Equal(t, "CUDA_SUCCESS", st.Init)
	require.NotEmpty(t, p.Devices())
	for _, impl := range p.Devices() {
		realSmoke(t, impl.(*device))
	}
}

// realSmoke exercises a real GPU: allocation of each kind, copies both ways
// sync and async, locking (shared when there are two devices) and external
// registrations.
func realSmoke(t *testing.T, d *device) {
	info := d.Info()
	t.Logf("device %d: %s, %d MiB, compute capability %s", d.ord, info.Name, info.Memory>>20, info.Capability)
	require.NotEmpty(t, info.Name)
	require.NotZero(t, info.Memory)
	const n = 1 << 20
	for _, k := range []plugin.MemKind{plugin.MemDevice, plugin.MemHost, plugin.MemShared} {
		p, err := d.Alloc(k, n)
		require.NoError(t, err, "alloc %s", k)
		require.NoError(t, d.Free(k, p))
	}
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	pattern(sb, 9)
	a, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, nil))
	require.NoError(t, d.Copy(dst, a, n, plugin.DeviceToHost, nil))
	require.True(t, bytes.Equal(sb, db))

	devp, err := d.LockHost(src, n)
	require.NoError(t, err)
	q, err := d.NewQueue()
	require.NoError(t, err)
	pattern(sb, 10)
	clear(db)
	require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(dst, a, n, plugin.DeviceToHost, q))
	require.NoError(t, q.Synchronize())
	done, err := q.Query()
	require.NoError(t, err)
	require.True(t, done)
	require.True(t, bytes.Equal(sb, db))
	require.NoError(t, d.Copy(dst, devp, n, plugin.DeviceToHost, nil), "the locked buffer's device address")
	require.True(t, bytes.Equal(sb, db))
	_, ok, err := d.ExternalLock(src, 16)
	require.NoError(t, err)
	require.False(t, ok, "our own lock is not external")
	require.NoError(t, q.Destroy())
	require.NoError(t, d.UnlockHost(src))

	ext, _ := hostBuf(t, n)
	registerDirectly(t, d, ext, n)
	e, ok, err := d.ExternalLock(ext+4096, 100)
	require.NoError(t, err)
	require.True(t, ok, "a registration made through the driver is external")
	t.Logf("external registration %#x+%d reported as host %#x dev %#x size %d", ext, n, e.Host, e.Dev, e.Size)
	require.LessOrEqual(t, e.Host, ext+4096)
	require.GreaterOrEqual(t, e.Host+e.Size, ext+4096+100)
	realPool(t, d, src, sb, dst, db)
}

// realPool exercises the stream-ordered pool on a real GPU that reports
// memory pools: our CUmemPoolProps is accepted, blocks carry data both
// ways, with and without a queue, and the attributes and trim answer.
func realPool(t *testing.T, d *device, src uintptr, sb []byte, dst uintptr, db []byte) {
	t.Logf("device %d: CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED with every pool symbol: %v", d.ord, d.poolsSupported)
	if !d.poolsSupported {
		require.Nil(t, d.MemPool())
		return
	}
	mp := d.MemPool()
	require.NotNil(t, mp, "cuMemPoolCreate with our CUmemPoolProps")
	n := uintptr(len(sb))
	p, err := mp.Alloc(n, nil)
	require.NoError(t, err)
	pattern(sb, 11)
	clear(db)
	require.NoError(t, d.Copy(p, src, n, plugin.HostToDevice, nil))
	require.NoError(t, d.Copy(dst, p, n, plugin.DeviceToHost, nil))
	require.True(t, bytes.Equal(sb, db))
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	require.NoError(t, d.Copy(p, src, n, plugin.HostToDevice, q))
	require.NoError(t, mp.Free(p, nil, []plugin.QueueImpl{q}), "after the queue's copy, without waiting")
	p2, err := mp.Alloc(n, q)
	require.NoError(t, err)
	require.NoError(t, d.Copy(p2, src, n, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(dst, p2, n, plugin.DeviceToHost, q))
	require.NoError(t, mp.Free(p2, q, nil))
	require.NoError(t, q.Synchronize())
	require.True(t, bytes.Equal(sb, db))
	reserved, used, err := mp.Stats()
	require.NoError(t, err)
	t.Logf("device %d: pool reserved %d, used %d after the frees (the free stream's may still be in flight)", d.ord, reserved, used)
	require.NoError(t, mp.Trim(0))
	reserved, _, err = mp.Stats()
	require.NoError(t, err)
	t.Logf("device %d: pool reserved %d after cuMemPoolTrimTo(0)", d.ord, reserved)
}
