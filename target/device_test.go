package target

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/internal/warn"
)

func TestMain(m *testing.M) {
	testenv.Neutralize(driversChildEnv, peerChildEnv, unavailableChildEnv, "OMPALLOC_TARGET_ORDERING_CHILD")
	vmLck, hasVmLck := procstatus.VmLckKiB()
	code := m.Run()
	var msgs []string
	if code == 0 {
		msgs = leaks()
	}
	if err := Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "shutdown:", err)
		code = 1
	}
	if code == 0 {
		msgs = append(msgs, vmLckLeak(vmLck, hasVmLck)...)
	}
	for _, msg := range msgs {
		fmt.Fprintln(os.Stderr, "FAIL: leak check:", msg)
		code = 1
	}
	os.Exit(code)
}

func TestDeviceNumberingHostOnly(t *testing.T) {
	withPlugins(t)
	require.Equal(t, 0, NumDevices())
	require.Equal(t, 0, InitialDevice())
	require.Equal(t, 0, DefaultDevice())
	d, err := Get(0)
	require.NoError(t, err)
	require.True(t, d.IsHost())
	require.Equal(t, "host", d.Info().Name)
	require.Equal(t, "host", d.Plugin())
	for _, bad := range []int{-1, 1, 42} {
		_, err := Get(bad)
		require.ErrorIs(t, err, ErrBadDevice)
		require.ErrorContains(t, err, fmt.Sprintf("device %d", bad))
		require.ErrorContains(t, err, "the only device is 0, the host")
	}
	require.Len(t, Devices(), 1)
	ps := Plugins()
	require.Len(t, ps, 1)
	require.Equal(t, "host", ps[0].Plugin)
	require.NoError(t, ps[0].Err)
}

func TestDeviceNumberingWithAccelerators(t *testing.T) {
	a, b, c := newFake("a", 0), newFake("b", 0), newFake("c", 0)
	withPlugins(t,
		&fakePlugin{name: "first", impls: []plugin.Impl{a, b}},
		&fakePlugin{name: "broken", impls: []plugin.Impl{newFake("never", 0)}, err: errInjected},
		&fakePlugin{name: "second", impls: []plugin.Impl{c}},
	)
	require.Equal(t, 3, NumDevices())
	require.Equal(t, 3, InitialDevice())
	var names []string
	for i, d := range Devices() {
		require.Equal(t, i, d.ID)
		names = append(names, d.Info().Name)
	}
	require.Equal(t, []string{"a", "b", "c", "host"}, names, "accelerators in plugin order, then the host")
	h, err := Get(3)
	require.NoError(t, err)
	require.True(t, h.IsHost())

	_, err = Get(4)
	require.ErrorIs(t, err, ErrBadDevice)
	require.ErrorContains(t, err, "valid: 0..3, 3 is the host")

	ps := Plugins()
	require.Len(t, ps, 4)
	require.Equal(t, []string{"first", "broken", "second", "host"},
		[]string{ps[0].Plugin, ps[1].Plugin, ps[2].Plugin, ps[3].Plugin})
	require.ErrorIs(t, ps[1].Err, errInjected, "a failed plugin's status is kept")

	require.Equal(t, 0, DefaultDevice())
	require.NoError(t, SetDefaultDevice(3))
	require.Equal(t, 3, DefaultDevice())
	require.ErrorIs(t, SetDefaultDevice(4), ErrBadDevice)
	require.ErrorIs(t, SetDefaultDevice(-1), ErrBadDevice)
	require.Equal(t, 3, DefaultDevice())
}

func TestDefaultDeviceFromEnvironment(t *testing.T) {
	tests := []struct {
		value string
		want  int
		warn  bool
	}{
		{"1", 1, false},
		{"initial", 2, false},
		{" 0 ", 0, false},
		{"3", 0, true},
		{"gpu", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv(envvar.DefaultDevice, tt.value)
			warned := captureWarnings(t)
			withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{newFake("a", 0), newFake("b", 0)}})
			require.Equal(t, tt.want, DefaultDevice())
			require.Equal(t, tt.warn, strings.Contains(warned(), envvar.DefaultDevice))
		})
	}
}

func captureWarnings(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	restore := warn.SetOutput(w)
	t.Cleanup(func() { restore(); r.Close(); w.Close() })
	return func() string {
		w.Close()
		b := make([]byte, 4096)
		n, _ := r.Read(b)
		return string(b[:max(n, 0)])
	}
}

func TestStagingEnvironment(t *testing.T) {
	t.Setenv(envvar.StagingThreshold, "16K")
	t.Setenv(envvar.StagingPool, "1MiB")
	_, d := withFake(t, 0)
	require.Equal(t, StagingConfig{Threshold: 16 << 10, MaxPoolBytes: 1 << 20}, d.StagingConfig())

	t.Setenv(envvar.StagingThreshold, "lots")
	warned := captureWarnings(t)
	_, d = withFake(t, 0)
	require.Equal(t, defaultStagingConfig().Threshold, d.StagingConfig().Threshold)
	require.Contains(t, warned(), envvar.StagingThreshold+`="lots"`)
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uintptr{"0": 0, "65536": 65536, "64K": 64 << 10, "64KiB": 64 << 10, "4m": 4 << 20, "1G": 1 << 30, " 2 KB ": 2048, "1T": 1 << 40} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "K", "1.5M", "lots"} {
		_, err := parseBytes(in)
		require.Error(t, err, in)
	}
}

func TestAllocFreeRegistry(t *testing.T) {
	f, d := withFake(t, 0)
	tests := []struct {
		kind       MemKind
		registered bool
	}{
		{MemDevice, false},
		{MemShared, false},
		{MemHost, true},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			p, err := d.Alloc(tt.kind, 1000)
			require.NoError(t, err)
			k, ok := d.Kind(p)
			require.True(t, ok)
			require.Equal(t, tt.kind, k)
			other := MemDevice
			if tt.kind == other {
				other = MemShared
			}
			err = d.Free(other, p)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, "allocated as "+tt.kind.String()+" memory")
			require.Equal(t, tt.registered, registered(d.Registry(), p+999))
			if tt.registered {
				e, ok := d.Registry().Entry(p + 10)
				require.True(t, ok)
				require.Equal(t, (p+10)|aliasBit, e.Dev+(p+10-e.Host), "the driver's device address for its own pinned memory")
			}
			require.NoError(t, d.Free(tt.kind, p))
			require.False(t, registered(d.Registry(), p))
			_, ok = d.Kind(p)
			require.False(t, ok)
			if tt.kind == MemDevice { // issue 31: a double free of device memory says so
				require.ErrorContains(t, d.Free(tt.kind, p), "freed already (a double free)")
			} else {
				require.ErrorContains(t, d.Free(tt.kind, p), "not allocated by this device")
			}
		})
	}
	_, err := d.Alloc(MemHost, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = d.Alloc(MemKind(9), 10)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, d.Free(MemDevice, 0), ErrInvalidArgument)

	// A lock inside host-pinned memory is a reference: the memory cannot be
	// freed under it, and no driver lock is taken.
	p, err := d.Alloc(MemHost, 4096)
	require.NoError(t, err)
	dev, err := d.LockMem(p+100, 50)
	require.NoError(t, err)
	require.Equal(t, (p+100)|aliasBit, dev)
	locks, _, _, _ := f.counts()
	require.Zero(t, locks)
	require.Error(t, d.Free(MemHost, p))
	require.NoError(t, d.UnlockMem(p+120))
	require.NoError(t, d.Free(MemHost, p))
}

func TestLockUnlockMem(t *testing.T) {
	f, d := withFake(t, 0)
	p := hostMem(t, 8192)
	dev, err := d.LockMem(p, 8192)
	require.NoError(t, err)
	require.Equal(t, p|aliasBit, dev)
	dev2, err := d.LockMem(p+4096, 100)
	require.NoError(t, err, "a contained range only adds a reference")
	require.Equal(t, (p+4096)|aliasBit, dev2)
	require.NoError(t, d.UnlockMem(p+4096))
	require.NoError(t, d.UnlockMem(p))
	locks, unlocks, _, _ := f.counts()
	require.Equal(t, 1, locks)
	require.Equal(t, 1, unlocks)
	require.Error(t, d.UnlockMem(p), "unlocking what is not locked")
	_, err = d.LockMem(0, 10)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = d.LockMem(p, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, d.UnlockMem(0), ErrInvalidArgument)
}

func TestMemcpyBetweenDevices(t *testing.T) {
	a, b := newFake("a", 10*time.Microsecond), newFake("b", 0)
	withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{a, b}})
	const n = 3 << 20
	h := hostMem(t, n)
	buf := map[int]uintptr{}
	for dev := range 2 {
		d, err := Get(dev)
		require.NoError(t, err)
		for _, k := range []int{dev * 2, dev*2 + 1} {
			buf[k], err = d.Alloc(MemDevice, n)
			require.NoError(t, err)
		}
	}
	host2 := hostMem(t, n)
	fill(h, n, 5)
	steps := []struct {
		dst, src       uintptr
		dstDev, srcDev int
	}{
		{buf[0], h, 0, 2},      // host → a
		{buf[1], buf[0], 0, 0}, // a → a
		{buf[2], buf[1], 1, 0}, // a → b, through the host
		{buf[3], buf[2], 1, 1}, // b → b
		{host2, buf[3], 2, 1},  // b → host
	}
	for i, s := range steps {
		require.NoError(t, Memcpy(s.dst, s.src, n, s.dstDev, s.srcDev), "step %d", i)
		require.True(t, hasFill(s.dst, n, 5), "step %d", i)
	}
	h3 := hostMem(t, 64)
	require.NoError(t, Memcpy(h3, h+8, 64, 2, 2), "host to host")
	require.Equal(t, cmem.Bytes(h+8, 64), cmem.Bytes(h3, 64))

	require.NoError(t, Memcpy(0, 0, 0, 0, 0), "nothing to copy")
	require.ErrorIs(t, Memcpy(0, h, 8, 0, 2), ErrInvalidArgument)
	err := Memcpy(h3, h, 8, 3, 2)
	require.ErrorIs(t, err, ErrBadDevice)
	require.ErrorContains(t, err, "memcpy to device 3")
	err = Memcpy(h3, h, 8, 2, -1)
	require.ErrorIs(t, err, ErrBadDevice)
	require.ErrorContains(t, err, "memcpy from device -1")
}

func TestQueueOfAnotherDevice(t *testing.T) {
	withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{newFake("a", 0), newFake("b", 0)}})
	a, _ := Get(0)
	b, _ := Get(1)
	q, err := b.NewQueue()
	require.NoError(t, err)
	dst, err := a.Alloc(MemDevice, 8)
	require.NoError(t, err)
	src := hostMem(t, 8)
	require.ErrorIs(t, a.submit(dst, src, 8, q), ErrInvalidArgument)
	require.NoError(t, q.Close())
	require.ErrorIs(t, b.submit(dst, src, 8, q), ErrQueueClosed)
}

func TestLockMappedHostBuffers(t *testing.T) {
	tests := []struct {
		mode      string
		failLock  bool
		wantErr   bool
		wantLocks int
	}{
		{"off", false, false, 0},
		{"on", false, false, 1},
		{"on", true, false, 0},
		{"mandatory", false, false, 1},
		{"mandatory", true, true, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/fail=%v", tt.mode, tt.failLock), func(t *testing.T) {
			t.Setenv(envvar.LockMapped, tt.mode)
			f, d := withFake(t, 0)
			f.failLock.Store(tt.failLock)
			const n = 1 << 20 // over the staging threshold
			src := hostMem(t, n)
			dst, err := d.Alloc(MemDevice, n)
			require.NoError(t, err)
			q, err := d.NewQueue()
			require.NoError(t, err)
			fill(src, n, 3)

			f.holdWork()
			err = d.submit(dst, src, n, q)
			if tt.wantErr {
				f.release()
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			locks, unlocks, pinnedCopies, _ := f.counts()
			require.Equal(t, tt.wantLocks, locks)
			require.Zero(t, unlocks, "the buffer stays locked while its copy is in flight")
			require.Equal(t, tt.wantLocks, pinnedCopies, "the copy read locked memory")
			f.release()
			require.NoError(t, q.Synchronize(context.Background()))
			_, unlocks, _, _ = f.counts()
			require.Equal(t, tt.wantLocks, unlocks, "and is unlocked once the copy completed")
			require.True(t, hasFill(dst, n, 3))

			// Synchronously, back.
			back := hostMem(t, n)
			require.NoError(t, d.retrieve(back, dst, n, nil))
			require.True(t, hasFill(back, n, 3))
			locks, unlocks, _, _ = f.counts()
			require.Equal(t, 2*tt.wantLocks, locks)
			require.Equal(t, 2*tt.wantLocks, unlocks)
			require.Zero(t, d.Registry().Stats().Entries)
		})
	}
	t.Run("invalid", func(t *testing.T) {
		t.Setenv(envvar.LockMapped, "sometimes")
		warned := captureWarnings(t)
		_, d := withFake(t, 0)
		require.Equal(t, pinreg.MapOff, d.mapMode)
		require.Contains(t, warned(), envvar.LockMapped)
	})
}

func TestHostDeviceTransfers(t *testing.T) {
	withPlugins(t)
	d, err := Get(InitialDevice())
	require.NoError(t, err)
	q, err := d.NewQueue()
	require.NoError(t, err)
	a, err := d.Alloc(MemDevice, 256)
	require.NoError(t, err)
	b, err := d.Alloc(MemHost, 256)
	require.NoError(t, err)
	src := hostMem(t, 256)
	fill(src, 256, 9)
	require.NoError(t, d.submit(a, src, 256, q))
	require.NoError(t, d.exchange(b, a, 256, q))
	done, err := q.Query()
	require.NoError(t, err)
	require.True(t, done)
	require.True(t, hasFill(b, 256, 9))
	require.Equal(t, StagingStats{}, d.StagingStats(), "the host never stages")
	require.NoError(t, q.Close())
	require.NoError(t, d.Free(MemDevice, a))
	require.NoError(t, d.Free(MemHost, b))
}
