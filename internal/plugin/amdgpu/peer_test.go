package amdgpu

import (
	"unsafe"

	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Copies between two GPUs go device to device: hsa_amd_memory_async_copy
// between the two agents, after each allocation was allowed to the other
// agent. The fake refuses a GPU's access to another GPU's VRAM until then,
// as the runtime does.
func TestPeerCopy(t *testing.T) {
	ds := fakeDevices(t)
	const n = 1 << 16
	host := hostBuffer(t, n)
	want := pattern(host, n, 51)
	a, err := ds[0].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemDevice, a)) }()
	b, err := ds[1].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, b)) }()
	require.NoError(t, ds[0].Copy(a, host, n, plugin.HostToDevice, nil))
	signals := count(t, "signals")

	err = ds[1].Copy(b, a, n, plugin.DeviceToDevice, nil)
	require.ErrorIs(t, err, &Error{Call: "hsa_amd_memory_async_copy", Code: StatusErrorInvalidAgent},
		"device 1 may not reach device 0's VRAM before access is allowed")

	can, err := ds[0].PeerAccess(ds[1])
	require.NoError(t, err)
	require.True(t, can)
	can, err = ds[0].PeerAccess(ds[0])
	require.NoError(t, err)
	require.False(t, can, "a device is not its own peer")

	// Synchronous, issued by the source device: complete on return.
	require.NoError(t, ds[0].CopyPeer(b, ds[1], a, ds[0], n, nil))
	back := hostBuffer(t, n)
	require.NoError(t, ds[1].Copy(back, b, n, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, n))
	require.Equal(t, map[uintptr][]uint64{a: {ds[1].agent}}, ds[0].granted)
	require.Equal(t, map[uintptr][]uint64{b: {ds[0].agent}}, ds[1].granted)

	// Queued on the destination device, in order with the queue's other
	// work: a copy back to the host issued after it reads what it wrote.
	pattern(host, n, 52)
	want2 := append([]byte(nil), cmem.Bytes(host, n)...)
	require.NoError(t, ds[0].Copy(a, host, n, plugin.HostToDevice, nil))
	q, err := ds[1].NewQueue()
	require.NoError(t, err)
	require.NoError(t, ds[1].CopyPeer(b, ds[1], a, ds[0], n, q))
	clear(cmem.Bytes(back, n))
	require.NoError(t, ds[1].Copy(back, b, n, plugin.DeviceToHost, q))
	require.NoError(t, q.Synchronize())
	require.Equal(t, want2, cmem.Bytes(back, n))
	require.Len(t, ds[0].granted[a], 1, "access is allowed once per allocation")

	// Bad arguments, by name, changing nothing (a nil or wrapping range is
	// the generic layer's to refuse: TestPeerCopyChecksAreGeneric).
	require.ErrorIs(t, ds[0].CopyPeer(b, ds[1], a, ds[0], n, q), ErrForeignQueue, "a queue of the other device")
	require.ErrorIs(t, ds[0].CopyPeer(b, ds[1], host, ds[0], n, nil), ErrNotAllocated, "not device 0's memory")
	require.ErrorIs(t, ds[0].CopyPeer(b+n-10, ds[1], a, ds[0], 100, nil), ErrNotAllocated, "runs past the allocation")
	require.NoError(t, q.Destroy())
	require.Equal(t, signals, count(t, "signals"))
}

func TestNoPeerAccess(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestNoPeerAccess", "FAKEHSA_NO_PEER=1") {
		return
	}
	ds := fakeDevices(t)
	can, err := ds[0].PeerAccess(ds[1])
	require.NoError(t, err)
	require.False(t, can, "the agents' access to each other's pool is NEVER_ALLOWED")
	a, err := ds[0].Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemDevice, a)) }()
	b, err := ds[1].Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, b)) }()
	require.ErrorIs(t, ds[0].CopyPeer(b, ds[1], a, ds[0], 4096, nil), ErrNoPeerAccess)
	agents := []uint64{ds[1].agent}
	err = ds[0].fn.status("hsa_amd_agents_allow_access", ds[0].fn.allowAccess, 1, uintptr(unsafe.Pointer(&agents[0])), 0, a)
	require.ErrorIs(t, err, &Error{Code: StatusErrorInvalidAgent}, "the fake refuses to allow what can never be")
}
