package amdgpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A copy that starts inside a locked range and runs past its end works, as
// on CUDA: the part inside uses the lock's agent pointer, the rest is locked
// for the transfer only. The runtime knows only whole locks, so asking it
// about the start used to refuse the copy with ErrPartialExternalLock.
func TestCopyRunsPastLockedEnd(t *testing.T) {
	ds := fakeDevices(t)
	d := ds[0]
	const n, locked = 1 << 16, 1 << 12
	prefixes := []struct {
		name string
		lock func(t *testing.T, p uintptr) // locks [p, p+locked)
	}{
		{"prefix locked by LockHost", func(t *testing.T, p uintptr) {
			_, err := d.LockHost(p, locked)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.UnlockHost(p)) })
		}},
		{"prefix locked outside the plugin", func(t *testing.T, p uintptr) {
			_, err := d.fn.lockFor(d.gpus, p, locked)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.fn.status("hsa_amd_memory_unlock", d.fn.memUnlock, p)) })
		}},
		{"prefix locked by another device", func(t *testing.T, p uintptr) {
			_, err := ds[1].LockHost(p, locked)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, ds[1].UnlockHost(p)) })
		}},
	}
	for _, pre := range prefixes {
		for _, async := range []bool{false, true} {
			name := pre.name
			if async {
				name += "/queued"
			}
			t.Run(name, func(t *testing.T) {
				host := hostBuffer(t, n)
				pre.lock(t, host)
				locks := count(t, "locks")
				dev, err := d.Alloc(plugin.MemDevice, n)
				require.NoError(t, err)
				defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
				var q plugin.QueueImpl
				if async {
					q, err = d.NewQueue()
					require.NoError(t, err)
					defer func() { require.NoError(t, q.Destroy()) }()
				}
				sync := func() {
					if q != nil {
						require.NoError(t, q.Synchronize())
					}
				}
				want := pattern(host, n, 41)
				require.NoError(t, d.Copy(dev, host, n, plugin.HostToDevice, q))
				sync()
				clear(cmem.Bytes(host, n))
				require.NoError(t, d.Copy(host+100, dev+100, n-100, plugin.DeviceToHost, q), "from inside the lock to past its end")
				sync()
				require.Equal(t, want[100:], cmem.Bytes(host+100, n-100))
				require.Equal(t, locks, count(t, "locks"), "the transfer's lock of the rest was released")
			})
		}
	}
}

// Two copies in flight from the same pageable base with different sizes:
// the first locks its range for the transfer, the second runs past that
// lock's end and locks only the rest. Both arrive; both locks go once the
// copies completed.
func TestConcurrentCopiesSameBaseDifferentSizes(t *testing.T) {
	d := fakeDevices(t)[0]
	const small, large = 8192, 1 << 16
	src := hostBuffer(t, large)
	want := pattern(src, large, 43)
	dev1, err := d.Alloc(plugin.MemDevice, large)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev1)) }()
	dev2, err := d.Alloc(plugin.MemDevice, large)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev2)) }()
	locks := count(t, "locks")
	q, err := d.NewQueue()
	require.NoError(t, err)
	require.NoError(t, d.Copy(dev1, src, small, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(dev2, src, large, plugin.HostToDevice, q), "past the end of the first copy's lock")
	require.Equal(t, locks+2, count(t, "locks"), "the first copy's lock and one of the rest, both in flight")
	require.NoError(t, q.Synchronize())
	require.Equal(t, locks, count(t, "locks"))
	require.NoError(t, q.Destroy())
	for _, c := range []struct{ dev, n uintptr }{{dev1, small}, {dev2, large}} {
		back := hostBuffer(t, c.n)
		require.NoError(t, d.Copy(back, c.dev, c.n, plugin.DeviceToHost, nil))
		require.Equal(t, want[:c.n], cmem.Bytes(back, c.n))
	}
}
