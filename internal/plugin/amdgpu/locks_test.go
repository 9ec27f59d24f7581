package amdgpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Where libhsakmt locks through the KFD SVM API, hsa_amd_pointer_info says
// UNKNOWN for locked memory. Copies from and to memory LockHost locked must
// still use the agent pointer from lock time, with no new lock: before the
// lock table, every such copy locked again (and a copy of a part of the
// range was refused by the runtime as an overlapping lock).
func TestSVMCopiesFromLockedMemory(t *testing.T) {
	d := fakeDevices(t)[0]
	t.Setenv("FAKEHSA_SVM", "1")
	const n = 1 << 16
	host := hostBuffer(t, n)
	_, err := d.LockHost(host, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.UnlockHost(host)) }()
	info, err := d.pointerInfo(host)
	require.NoError(t, err)
	require.Equal(t, uint32(pointerTypeUnknown), info.Type, "the fake answers as ROCm does with SVM")

	dev, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()

	calls, locks := count(t, "lock_calls"), count(t, "locks")
	for _, c := range []struct {
		name     string
		off, len uintptr
		q        plugin.QueueImpl
	}{
		{"whole range, synchronous", 0, n, nil},
		{"whole range, queued", 0, n, q},
		{"part, synchronous", 4096, 8192, nil},
		{"part, queued", 100, 1000, q},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := pattern(host+c.off, c.len, byte(c.off))
			require.NoError(t, d.Copy(dev, host+c.off, c.len, plugin.HostToDevice, c.q))
			if c.q != nil {
				require.NoError(t, c.q.Synchronize()) // the copy reads host late
			}
			clear(cmem.Bytes(host+c.off, c.len))
			require.NoError(t, d.Copy(host+c.off, dev, c.len, plugin.DeviceToHost, c.q))
			if c.q != nil {
				require.NoError(t, c.q.Synchronize())
			}
			require.Equal(t, want, cmem.Bytes(host+c.off, c.len))
			require.Equal(t, calls, count(t, "lock_calls"), "no hsa_amd_memory_lock for a copy of locked memory")
			require.Equal(t, locks, count(t, "locks"))
		})
	}
}

// With SVM, a range one device locked is invisible to the runtime's pointer
// info, so another device's registry used to lock a part of it again (which
// the runtime refuses). The plugin's lock table makes it a reference to the
// one lock, made for every GPU; the lock lives until its last reference.
func TestSVMLockSharedByDevices(t *testing.T) {
	ds := fakeDevices(t)
	t.Setenv("FAKEHSA_SVM", "1")
	const n = 1 << 16
	host := hostBuffer(t, n)
	locks := count(t, "locks")
	agent, err := ds[0].LockHost(host, n)
	require.NoError(t, err)
	calls := count(t, "lock_calls")

	_, ext, err := ds[1].ExternalLock(host+4096, 4096)
	require.NoError(t, err)
	require.False(t, ext, "the plugin's own lock, not an external one")
	got, err := ds[1].LockHost(host+4096, 4096)
	require.NoError(t, err)
	require.Equal(t, agent+4096, got, "the agent pointer from lock time")
	require.Equal(t, calls, count(t, "lock_calls"), "a reference, no second lock")

	dev, err := ds[1].Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, dev)) }()
	want := pattern(host+4096, 4096, 21)
	require.NoError(t, ds[1].Copy(dev, host+4096, 4096, plugin.HostToDevice, nil), "device 1 reaches device 0's lock")
	back := hostBuffer(t, 4096)
	require.NoError(t, ds[1].Copy(back, dev, 4096, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, 4096))

	require.NoError(t, ds[0].UnlockHost(host))
	require.Equal(t, locks+1, count(t, "locks"), "device 1 still holds the lock")
	require.NoError(t, ds[1].UnlockHost(host+4096))
	require.Equal(t, locks, count(t, "locks"), "the last reference unlocked")
	require.Empty(t, ds[0].tab.Snapshot())
}

// The lock is made for every GPU agent: the fake refuses copies by an agent
// a lock was not made for, as the runtime maps locked memory only for the
// agents it was given.
func TestLockServesEveryGPU(t *testing.T) {
	ds := fakeDevices(t)
	const n = 8192
	host := hostBuffer(t, n)
	_, err := ds[0].LockHost(host, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].UnlockHost(host)) }()
	dev, err := ds[1].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, dev)) }()
	want := pattern(host, n, 5)
	calls := count(t, "lock_calls")
	require.NoError(t, ds[1].Copy(dev, host, n, plugin.HostToDevice, nil))
	require.Equal(t, calls, count(t, "lock_calls"))
	back := hostBuffer(t, n)
	require.NoError(t, ds[1].Copy(back, dev, n, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, n))

	// A lock made for device 0's agent only (behind the plugin's back) is
	// not usable by device 1: the fake says so, as the runtime would fault.
	other := hostBuffer(t, n)
	a0, err := ds[0].lockLocked(other, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].fn.status("hsa_amd_memory_unlock", ds[0].fn.memUnlock, other)) }()
	err = ds[1].Copy(dev, a0, n, plugin.DeviceToDevice, nil)
	require.ErrorIs(t, err, &Error{Call: "hsa_amd_memory_async_copy", Code: StatusErrorInvalidAgent})
}

// Memory of an HSA pool (HSA_EXT_POINTER_TYPE_HSA: here another device's
// host allocation) is GPU-accessible already and cannot be locked: the
// runtime refuses hsa_amd_memory_lock on it. A registry Lock on it (what
// target.Device.LockMem does) must succeed without that call, and its
// unlock must leave the allocation alone.
func TestLockOfPoolMemory(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	h, err := ds[0].Alloc(plugin.MemHost, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemHost, h)) }()

	_, err = ds[1].lockLocked(h, n)
	require.ErrorIs(t, err, &Error{Call: "hsa_amd_memory_lock", Code: StatusErrorInvalidArgument},
		"the fake refuses to lock pool memory, as the runtime does")

	for _, svm := range []string{"0", "1"} {
		t.Run("SVM="+svm, func(t *testing.T) {
			t.Setenv("FAKEHSA_SVM", svm)
			for _, d := range ds {
				lockPoolMemory(t, d, h+100, 1000)
			}
		})
	}
}

// lockPoolMemory locks, copies from and unlocks [p, p+m), memory of a pool,
// through a registry of d.
func lockPoolMemory(t *testing.T, d *device, p, m uintptr) {
	reg := pinreg.New(d)
	calls, allocs := count(t, "lock_calls"), count(t, "allocs")
	dev, err := reg.Lock(p, m)
	require.NoError(t, err, "device %d", d.index)
	require.Equal(t, p, dev, "pool memory is its own agent pointer")
	require.Equal(t, calls, count(t, "lock_calls"), "no hsa_amd_memory_lock")

	vram, err := d.Alloc(plugin.MemDevice, m)
	require.NoError(t, err)
	want := pattern(p, m, 31)
	require.NoError(t, d.Copy(vram, p, m, plugin.HostToDevice, nil))
	back := hostBuffer(t, m)
	require.NoError(t, d.Copy(back, vram, m, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, m))
	require.NoError(t, d.Free(plugin.MemDevice, vram))

	require.NoError(t, reg.Unlock(p))
	require.Zero(t, reg.Len())
	require.Equal(t, allocs, count(t, "allocs"), "the allocation stays")
}
