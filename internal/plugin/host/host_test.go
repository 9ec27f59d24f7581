package host

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/procstatus"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// vmLck returns the process's locked memory in kB, or skips off Linux.
func vmLck(t *testing.T) int {
	t.Helper()
	n, ok := procstatus.VmLckKiB()
	if !ok {
		t.Skip("VmLck is read from /proc/self/status (Linux only)")
	}
	return n
}

func hostDevice(t *testing.T) *device {
	t.Helper()
	p := New()
	require.Equal(t, "host", p.Name())
	require.NoError(t, p.Init())
	devs := p.Devices()
	require.Len(t, devs, 1)
	d := devs[0].(*device)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func mapPages(t *testing.T, pages int) uintptr {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	n := uintptr(pages) * pageSize
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Unmap(p, n)) })
	return p
}

func TestLockSharedPage(t *testing.T) {
	d := hostDevice(t)
	base := vmLck(t)
	kb := int(pageSize / 1024)
	p := mapPages(t, 3)
	half := pageSize / 2
	// a covers pages 0-1, b covers pages 1-2: page 1 is shared.
	a, b := p+half, p+pageSize+half
	dev, err := d.LockHost(a, pageSize)
	require.NoError(t, err)
	require.Equal(t, a, dev, "the host's device address is the host address")
	_, err = d.LockHost(b, pageSize)
	require.NoError(t, err)
	require.Equal(t, base+3*kb, vmLck(t))

	require.NoError(t, d.UnlockHost(a))
	require.Equal(t, base+2*kb, vmLck(t), "page 1 is still locked by b")
	require.NoError(t, d.UnlockHost(b))
	require.Equal(t, base, vmLck(t))

	err = d.UnlockHost(b)
	require.ErrorIs(t, err, ErrNotLocked)
	require.ErrorContains(t, err, "munlock")
}

func TestLockSameStartTwice(t *testing.T) {
	d := hostDevice(t)
	base := vmLck(t)
	kb := int(pageSize / 1024)
	p := mapPages(t, 4)
	_, err := d.LockHost(p, 4*pageSize)
	require.NoError(t, err)
	_, err = d.LockHost(p, pageSize)
	require.NoError(t, err)
	require.NoError(t, d.UnlockHost(p)) // the most recent lock: one page
	require.Equal(t, base+4*kb, vmLck(t))
	require.NoError(t, d.UnlockHost(p))
	require.Equal(t, base, vmLck(t))
}

func TestLockInvalid(t *testing.T) {
	d := hostDevice(t)
	_, err := d.LockHost(4096, 0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	_, err = d.LockHost(^uintptr(0)-10, 100)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
}

func TestAllocKinds(t *testing.T) {
	tests := []struct {
		kind   plugin.MemKind
		n      uintptr
		locked bool
	}{
		{plugin.MemDevice, 100, false},
		{plugin.MemShared, 3 * pageSize, false},
		{plugin.MemHost, 1 << 20, true},
		{plugin.MemHost, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			d := hostDevice(t)
			base := vmLck(t)
			p, err := d.Alloc(tt.kind, tt.n)
			require.NoError(t, err)
			require.Zero(t, p%pageSize, "page granular")
			b := cmem.Bytes(p, tt.n)
			require.Equal(t, byte(0), b[tt.n-1], "fresh memory is zero")
			b[0], b[tt.n-1] = 1, 2
			want := base
			if tt.locked {
				want += int((tt.n + pageSize - 1) / pageSize * pageSize / 1024)
			}
			require.Equal(t, want, vmLck(t))
			other := plugin.MemDevice
			if tt.kind == plugin.MemDevice {
				other = plugin.MemHost
			}
			require.ErrorIs(t, d.Free(other, p), ErrNotAllocated, "free with another kind is refused")
			require.NoError(t, d.Free(tt.kind, p))
			require.Equal(t, base, vmLck(t))
			require.ErrorIs(t, d.Free(tt.kind, p), ErrNotAllocated, "double free is refused")
		})
	}
}

func TestAllocInvalid(t *testing.T) {
	d := hostDevice(t)
	_, err := d.Alloc(plugin.MemDevice, 0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	_, err = d.Alloc(plugin.MemKind(42), 8)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
}

func TestCopyAndQueue(t *testing.T) {
	d := hostDevice(t)
	src, err := d.Alloc(plugin.MemHost, 64)
	require.NoError(t, err)
	dst, err := d.Alloc(plugin.MemDevice, 64)
	require.NoError(t, err)
	copy(cmem.Bytes(src, 64), "hello, device")
	q, err := d.NewQueue()
	require.NoError(t, err)
	for _, dir := range []plugin.Direction{plugin.HostToDevice, plugin.DeviceToHost, plugin.DeviceToDevice, plugin.HostToHost} {
		clear(cmem.Bytes(dst, 64))
		require.NoError(t, d.Copy(dst, src, 13, dir, q))
		done, err := q.Query()
		require.NoError(t, err)
		require.True(t, done, "host queues finish at once")
		require.Equal(t, "hello, device", string(cmem.Bytes(dst, 13)), dir.String())
	}
	require.NoError(t, q.Synchronize())
	require.NoError(t, q.Destroy())
	require.ErrorIs(t, d.Copy(0, src, 1, plugin.HostToDevice, nil), sentinel.ErrInvalidArgument)
}

func TestInfoAndStatus(t *testing.T) {
	p := New()
	require.NoError(t, p.Init())
	s := p.Status()
	require.Equal(t, "host", s.Plugin)
	require.NoError(t, s.Err)
	info := p.Devices()[0].Info()
	require.Equal(t, "host", info.Name)
	require.Equal(t, "host", info.Vendor)
	require.Equal(t, -1, info.NUMANode)
	require.Greater(t, info.Memory, uint64(1<<20))
	_, ext, err := p.Devices()[0].ExternalLock(4096, 4096)
	require.NoError(t, err)
	require.False(t, ext)
}

func TestCloseReleasesEverything(t *testing.T) {
	base := vmLck(t)
	d := newDevice()
	_, err := d.Alloc(plugin.MemHost, 2*pageSize)
	require.NoError(t, err)
	p := mapPages(t, 1)
	_, err = d.LockHost(p, 10)
	require.NoError(t, err)
	require.Greater(t, vmLck(t), base)
	require.NoError(t, d.Close())
	require.Equal(t, base, vmLck(t))
	require.Empty(t, d.allocs)
	require.Empty(t, d.locks)
}

const limitChildEnv = "OMPALLOC_HOST_LIMIT_CHILD"

// TestLockLimit runs TestLockLimitChild without CAP_IPC_LOCK under a 64 KiB
// RLIMIT_MEMLOCK (root ignores the limit otherwise).
func TestLockLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("setpriv and prlimit are Linux tools")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit not found (util-linux)")
	}
	args := []string{prlimit, "--memlock=65536:65536", os.Args[0], "-test.run=^TestLockLimitChild$", "-test.v"}
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv not found (util-linux): root would ignore RLIMIT_MEMLOCK")
		}
		args = append([]string{setpriv, "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), limitChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestLockLimitChild", "%s", out)
}

func TestLockLimitChild(t *testing.T) {
	if os.Getenv(limitChildEnv) == "" {
		t.Skip("run by TestLockLimit under a lowered RLIMIT_MEMLOCK")
	}
	require.Equal(t, 0, vmLck(t))
	d := hostDevice(t)
	kb := int(pageSize / 1024)
	p := mapPages(t, 64)

	// Within the limit.
	_, err := d.LockHost(p+pageSize, pageSize)
	require.NoError(t, err)
	require.Equal(t, kb, vmLck(t))

	// Over it: page 0 locks, pages 2-63 fail; page 0 must be unlocked again.
	_, err = d.LockHost(p, 64*pageSize)
	t.Log(err)
	require.ErrorIs(t, err, ErrLockLimit)
	require.ErrorContains(t, err, "RLIMIT_MEMLOCK is 65536 bytes: raise it with `ulimit -l`, `docker run --ulimit memlock=-1` or `LimitMEMLOCK=` in a systemd unit")
	require.ErrorContains(t, err, "mlock")
	require.Equal(t, kb, vmLck(t), "a failed lock leaves nothing locked behind")

	require.NoError(t, d.UnlockHost(p+pageSize))
	require.Equal(t, 0, vmLck(t))

	_, err = d.Alloc(plugin.MemHost, 1<<20)
	require.ErrorIs(t, err, ErrLockLimit)
	require.True(t, errors.Is(err, ErrLockLimit))
	require.Empty(t, d.allocs, "a failed pinned allocation is unmapped")
	require.Equal(t, 0, vmLck(t))
}
