package target

import (
	"context"
	"testing"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/stretchr/testify/require"
)

// The argument checks of a copy are the generic layer's, once for every
// vendor (plugin.Impl.Copy's contract): an empty, nil or wrapping range, a
// queue of another device and a host-to-host copy never reach a vendor's
// Copy, which no longer checks them itself.
func TestCopyChecksAreGeneric(t *testing.T) {
	a, b := newFake("a", 0), newFake("b", 0)
	withPlugins(t, &fakePlugin{name: "fake", impls: []plugin.Impl{a, b}})
	d0, err := Get(0)
	require.NoError(t, err)
	d1, err := Get(1)
	require.NoError(t, err)
	host := InitialDevice()
	q0, err := d0.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { _ = q0.Close() })
	q1, err := d1.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { _ = q1.Close() })
	dev, err := d0.Alloc(MemDevice, 64)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d0.Free(MemDevice, dev) })
	h, h2 := hostMem(t, 4096), hostMem(t, 4096)
	wrap := ^uintptr(0) - 15 // 16 bytes left before the address space ends

	for _, tt := range []struct {
		name string
		run  func() error
	}{
		{"submit of 0 bytes", func() error { return d0.submit(dev, h, 0, nil) }},
		{"submit from nil", func() error { return d0.submit(dev, 0, 64, q0) }},
		{"submit to nil", func() error { return d0.submit(0, h, 64, nil) }},
		{"submit from a wrapping range", func() error { return d0.submit(dev, wrap, 64, nil) }},
		{"submit on another device's queue", func() error { return d0.submit(dev, h, 64, q1) }},
		{"retrieve to a wrapping range", func() error { return d0.retrieve(wrap, dev, 64, q0) }},
		{"retrieve from nil", func() error { return d0.retrieve(h, 0, 64, nil) }},
		{"retrieve on another device's queue", func() error { return d0.retrieve(h, dev, 64, q1) }},
		{"exchange of 0 bytes", func() error { return d0.exchange(dev, dev, 0, q0) }},
		{"exchange within a wrapping range", func() error { return d0.exchange(wrap, dev, 64, nil) }},
		{"exchange on another device's queue", func() error { return d0.exchange(dev, dev, 64, q1) }},
		{"memcpy from nil", func() error { return Memcpy(dev, 0, 64, 0, host) }},
		{"memcpy from a wrapping range", func() error { return Memcpy(dev, wrap, 64, 0, host) }},
		{"async memcpy on a third device's queue", func() error { return MemcpyAsync(dev, h, 64, 0, host, q1) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.run(), ErrInvalidArgument)
		})
	}

	// Empty copies between devices and host-to-host copies are done here
	// without the vendor: nothing, and a memmove after the queue's work.
	require.NoError(t, Memcpy(dev, h, 0, 0, host))
	fill(h, 64, 3)
	require.NoError(t, Memcpy(h2, h, 64, host, host))
	require.True(t, hasFill(h2, 64, 3))
	require.Zero(t, a.contractBreaks.Load()+b.contractBreaks.Load(), "a vendor's Copy was called with what the generic layer must refuse")
}

// The argument checks of a copy between two accelerators of one plugin
// (plugin.PeerCopier.CopyPeer) are the generic layer's too: an empty, nil
// or wrapping range and a queue of neither device never reach a vendor's
// CopyPeer, which no longer checks them itself.
func TestPeerCopyChecksAreGeneric(t *testing.T) {
	a, b := newFakePeer("a", 0), newFakePeer("b", 0)
	a.reach[b.fakeImpl], b.reach[a.fakeImpl] = true, true
	withPlugins(t, &fakePlugin{name: "fake", impls: []plugin.Impl{a, b}})
	d0, err := Get(0)
	require.NoError(t, err)
	d1, err := Get(1)
	require.NoError(t, err)
	hostDev, err := Get(InitialDevice())
	require.NoError(t, err)
	q1, err := d1.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { _ = q1.Close() })
	qh, err := hostDev.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { _ = qh.Close() })
	src, err := d0.Alloc(MemDevice, 64)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d0.Free(MemDevice, src) })
	dst, err := d1.Alloc(MemDevice, 64)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d1.Free(MemDevice, dst) })
	wrap := ^uintptr(0) - 15

	for _, tt := range []struct {
		name string
		run  func() error
	}{
		{"from nil", func() error { return Memcpy(dst, 0, 64, 1, 0) }},
		{"to nil", func() error { return MemcpyAsync(0, src, 64, 1, 0, q1) }},
		{"from a wrapping range", func() error { return Memcpy(dst, wrap, 64, 1, 0) }},
		{"to a wrapping range", func() error { return MemcpyAsync(wrap, src, 64, 1, 0, q1) }},
		{"on a queue of neither device", func() error { return MemcpyAsync(dst, src, 64, 1, 0, qh) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.run(), ErrInvalidArgument)
		})
	}
	require.NoError(t, Memcpy(dst, src, 0, 1, 0), "an empty copy is done here")
	peerCopies := func() int {
		_, pa, _, _ := a.stats()
		_, pb, _, _ := b.stats()
		return pa + pb
	}
	require.Zero(t, peerCopies(), "nothing reached a vendor")

	fill(src, 64, 5)
	require.NoError(t, Memcpy(dst, src, 64, 1, 0))
	require.True(t, hasFill(dst, 64, 5))
	fill(src, 64, 6)
	require.NoError(t, MemcpyAsync(dst, src, 64, 1, 0, q1), "on a queue of the destination")
	require.NoError(t, q1.Synchronize(context.Background()))
	require.True(t, hasFill(dst, 64, 6))
	require.Equal(t, 2, peerCopies(), "both went device to device")
	require.Zero(t, a.contractBreaks.Load()+b.contractBreaks.Load(), "a vendor's CopyPeer was called with what the generic layer must refuse")
}
