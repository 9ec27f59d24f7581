package cuda

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

func peerEnabled(t *testing.T, a, b int) int {
	return int(int32(call(hookFn(t, "fakecuda_peer_enabled"), uintptr(a), uintptr(b))))
}

// Two devices that reach each other: PeerAccess enables access both ways
// once, and copies go device to device with cuMemcpyPeerAsync, synchronously
// (complete on return) or on a queue of either device.
func TestPeerCopy(t *testing.T) {
	t.Setenv("FAKECUDA_COPY_DELAY_US", "100000") // read by a stream's worker at creation
	d0, d1 := dev(t, 0), dev(t, 1)
	ok, err := d0.PeerAccess(d1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, peerEnabled(t, 0, 1))
	require.Equal(t, 1, peerEnabled(t, 1, 0))
	enables := calls(t, "cuCtxEnablePeerAccess")
	for range 3 {
		ok, err := d1.PeerAccess(d0)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Equal(t, enables, calls(t, "cuCtxEnablePeerAccess"), "the answer is kept for the pair")
	ok, err = d0.PeerAccess(d0)
	require.NoError(t, err)
	require.False(t, ok, "a device is not its own peer")

	const n = 1 << 20
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	pattern(sb, 0x21)
	a, err := d0.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d0.Free(plugin.MemDevice, a)
	b, err := d1.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d1.Free(plugin.MemDevice, b)
	require.NoError(t, d0.Copy(a, src, n, plugin.HostToDevice, nil))

	peers := calls(t, "cuMemcpyPeerAsync")
	require.NoError(t, d0.CopyPeer(b, d1, a, d0, n, nil))
	require.Equal(t, peers+1, calls(t, "cuMemcpyPeerAsync"))
	q, err := d1.NewQueue() // complete on return: a queue of the destination sees it
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	require.NoError(t, d1.Copy(dst, b, n, plugin.DeviceToHost, q))
	require.NoError(t, q.Synchronize())
	require.True(t, bytes.Equal(sb, db))

	// On the destination's queue, back the other way, late.
	pattern(sb, 0x22)
	require.NoError(t, d1.Copy(b, src, n, plugin.HostToDevice, nil))
	require.NoError(t, d1.CopyPeer(a, d0, b, d1, n, q))
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done, "enqueued, not done")
	require.NoError(t, q.Synchronize())
	clear(db)
	require.NoError(t, d0.Copy(dst, a, n, plugin.DeviceToHost, nil))
	require.True(t, bytes.Equal(sb, db))

	require.ErrorIs(t, d0.CopyPeer(a, d0, b, d1, n, q), sentinel.ErrInvalidArgument, "a queue of another device")
}

// Devices that cannot reach each other (FAKECUDA_PEER=none): no access is
// enabled and PeerAccess says no, once.
func TestPeerAccessUnavailable(t *testing.T) {
	needFake(t)
	runChild(t, "TestPeerAccessUnavailableChild", "FAKECUDA_PEER=none", "FAKECUDA_FAIL=")
}

func TestPeerAccessUnavailableChild(t *testing.T) {
	inChild(t)
	require.Equal(t, "none", os.Getenv("FAKECUDA_PEER"))
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	d0, d1 := p.devices[0], p.devices[1]
	for range 2 {
		ok, err := d0.PeerAccess(d1)
		require.NoError(t, err)
		require.False(t, ok)
	}
	require.Equal(t, 1, calls(t, "cuDeviceCanAccessPeer"), "asked once")
	require.Zero(t, calls(t, "cuCtxEnablePeerAccess"))
	require.NoError(t, d0.Close())
	require.NoError(t, d1.Close())
}

// cuCtxEnablePeerAccess refused with CUDA_ERROR_TOO_MANY_PEERS in the second
// direction: the first is disabled again, so no peer slot stays taken for a
// pair that is never used (without NVSwitch a device has eight).
func TestPeerAccessTooManyPeers(t *testing.T) {
	needFake(t)
	runChild(t, "TestPeerAccessTooManyPeersChild", "FAKECUDA_FAIL=cuCtxEnablePeerAccess:2=711")
}

func TestPeerAccessTooManyPeersChild(t *testing.T) {
	inChild(t)
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	d0, d1 := p.devices[0], p.devices[1]
	enabled := func(a, b int) int {
		return int(int32(call(hookFn(t, "fakecuda_peer_enabled"), uintptr(a), uintptr(b))))
	}
	ok, err := d0.PeerAccess(d1)
	require.NoError(t, err)
	require.False(t, ok, "too many peers means no")
	require.Equal(t, 2, calls(t, "cuCtxEnablePeerAccess"), "one per direction")
	require.Zero(t, enabled(0, 1), "the direction that was enabled is disabled again")
	require.Zero(t, enabled(1, 0))
	ok, err = d1.PeerAccess(d0)
	require.NoError(t, err)
	require.False(t, ok, "the answer is kept for the pair")
	require.NoError(t, d0.Close())
	require.NoError(t, d1.Close())
}
