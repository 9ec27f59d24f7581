package amdgpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Tests of the plugin against what ROCr does where the fake used to be
// kinder (issue 19): no allocatable coarse-grained pool, VRAM with a host
// address in pointer info, unlocks that do not count, full-profile APUs.

// A GPU agent without an allocatable coarse-grained pool has no VRAM:
// PeerAccess says no (it dereferenced the nil pool before), so target
// bounces copies with it through pinned host buffers.
func TestPeerAccessWithoutCoarsePool(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestPeerAccessWithoutCoarsePool", "FAKEHSA_GPUS=3", "FAKEHSA_NO_COARSE_GPUS=1") {
		return
	}
	ds := fakeDevices(t)
	require.Len(t, ds, 3)
	require.Nil(t, ds[1].pools.coarse, "the fake's mode: GPU 1's coarse pool cannot be allocated from")
	require.NotNil(t, ds[0].pools.coarse)
	for _, pair := range [][2]*device{{ds[0], ds[1]}, {ds[1], ds[0]}, {ds[1], ds[2]}} {
		can, err := pair[0].PeerAccess(pair[1])
		require.NoError(t, err)
		require.False(t, can, "device %d and %d", pair[0].index, pair[1].index)
	}
	can, err := ds[0].PeerAccess(ds[2])
	require.NoError(t, err)
	require.True(t, can, "the two GPUs with VRAM still reach each other")
	_, err = ds[1].Alloc(plugin.MemDevice, 4096)
	require.ErrorIs(t, err, ErrNoPool)
	a, err := ds[0].Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemDevice, a)) }()
	h, err := ds[1].Alloc(plugin.MemHost, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemHost, h)) }()
	require.ErrorIs(t, ds[0].CopyPeer(h, ds[1], a, ds[0], 4096, nil), ErrNoPeerAccess)
}

// LockMem of VRAM is refused by name: ROCr reports a host address for VRAM
// too, so the plugin looks at the owning agent.
func TestLockOfVRAMRefused(t *testing.T) {
	ds := fakeDevices(t)
	v, err := ds[1].Alloc(plugin.MemDevice, 1<<16)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, v)) }()
	info, err := ds[0].pointerInfo(v)
	require.NoError(t, err)
	require.Equal(t, v, info.HostBase, "as ROCr: a host address for VRAM")

	reg := pinreg.New(ds[0])
	_, err = reg.Lock(v+4096, 4096)
	require.ErrorIs(t, err, ErrDeviceMemory)
	require.ErrorContains(t, err, "amdgpu device 1's pool (VRAM")
	require.Zero(t, reg.Len(), "nothing registered")
	_, ok, err := ds[1].ExternalLock(v, 1<<16)
	require.ErrorIs(t, err, ErrDeviceMemory, "the owner's own device refuses too")
	require.False(t, ok)

	// Host memory of a pool is still external (pinned already).
	h, err := ds[1].Alloc(plugin.MemHost, 1<<16)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemHost, h)) }()
	dev, err := reg.Lock(h, 1<<16)
	require.NoError(t, err)
	require.Equal(t, h, dev)
	require.NoError(t, reg.Unlock(h))
}

// ROCr's unlock does not count: the first unlock of a range locked twice
// unmaps it. The plugin locks a range once for all its devices and
// transfers, and unlocks with the last reference, so copies from a range
// still locked for one device keep working after another device unlocked.
func TestOneRuntimeLockPerRange(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	host := hostBuffer(t, n)
	want := pattern(host, n, 7)
	locks, calls := count(t, "locks"), count(t, "lock_calls")
	_, err := ds[0].LockHost(host, n)
	require.NoError(t, err)
	_, err = ds[1].LockHost(host, n)
	require.NoError(t, err)
	require.Equal(t, calls+1, count(t, "lock_calls"), "one runtime lock for both devices")
	require.NoError(t, ds[0].UnlockHost(host))
	require.Equal(t, locks+1, count(t, "locks"), "still locked for device 1")
	v, err := ds[1].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, v)) }()
	require.NoError(t, ds[1].Copy(v, host, n, plugin.HostToDevice, nil))
	back := hostBuffer(t, n)
	require.NoError(t, ds[1].Copy(back, v, n, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, n))
	require.NoError(t, ds[1].UnlockHost(host))
	require.Equal(t, locks, count(t, "locks"))
}

// The fake follows ROCr: a second lock of an identical range is no count,
// the first unlock ends it, and an unlock of memory not locked succeeds.
func TestFakeUnlockDoesNotCount(t *testing.T) {
	d := fakeDevices(t)[0]
	host := hostBuffer(t, 4096)
	locks, stray := count(t, "locks"), count(t, "stray_unlocks")
	a1, err := d.lockLocked(host, 4096)
	require.NoError(t, err)
	a2, err := d.lockLocked(host, 4096)
	require.NoError(t, err)
	require.Equal(t, a1, a2)
	require.NoError(t, d.fn.status("hsa_amd_memory_unlock", d.fn.memUnlock, host))
	require.Equal(t, locks, count(t, "locks"), "the first unlock ends both locks")
	require.NoError(t, d.fn.status("hsa_amd_memory_unlock", d.fn.memUnlock, host), "ROCr: success for memory not locked")
	require.Equal(t, stray+1, count(t, "stray_unlocks"))
}

// An unlock that fails leaves the range locked (ROCr's unlock fails only
// before it changed anything, and unlocking again is harmless), so the
// plugin says ErrStillLocked and keeps its entry, and the registry keeps
// its own: a retry unlocks for real. Before, the registry erased its entry
// while the plugin kept the lock, which then leaked.
func TestUnlockFailureIsStillLocked(t *testing.T) {
	ds := fakeDevices(t)
	host := hostBuffer(t, 1<<16)
	locks := count(t, "locks")
	reg := pinreg.New(ds[0])
	_, err := reg.Lock(host, 1<<16)
	require.NoError(t, err)
	t.Setenv("FAKEHSA_FAIL", "hsa_amd_memory_unlock:1")
	err = reg.Unlock(host)
	require.ErrorIs(t, err, sentinel.ErrStillLocked)
	require.ErrorIs(t, err, &Error{Call: "hsa_amd_memory_unlock", Code: StatusErrorOutOfResources})
	require.Equal(t, 1, reg.Len(), "the registry keeps the entry")
	require.Equal(t, locks+1, count(t, "locks"))
	require.NoError(t, reg.Unlock(host), "the retry")
	require.Zero(t, reg.Len())
	require.Equal(t, locks, count(t, "locks"), "unlocked for real")
	require.Empty(t, ds[0].tab.Snapshot())
}

// On a full-profile APU the lock returns the host pointer itself and
// registers nothing; locks, copies and unlocks work the same.
func TestAPU(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestAPU", "FAKEHSA_APU=1") {
		return
	}
	ds := fakeDevices(t)
	const n = 1 << 16
	host := hostBuffer(t, n)
	want := pattern(host, n, 9)
	dev, err := ds[0].LockHost(host, n)
	require.NoError(t, err)
	require.Equal(t, host, dev, "the agent pointer is the host pointer")
	require.Zero(t, count(t, "locks"), "nothing registered")
	v, err := ds[0].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemDevice, v)) }()
	require.NoError(t, ds[0].Copy(v, host+100, n-100, plugin.HostToDevice, nil))
	require.NoError(t, ds[0].UnlockHost(host))
	// Pageable memory: locked (a no-op) for the copy, released after.
	back := hostBuffer(t, n)
	require.NoError(t, ds[0].Copy(back, v, n-100, plugin.DeviceToHost, nil))
	require.Equal(t, want[100:], cmem.Bytes(back, n-100))
	require.Empty(t, ds[0].tab.Snapshot())
	_, ok, err := ds[0].ExternalLock(host, n)
	require.NoError(t, err)
	require.False(t, ok)
}
