package target

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// fakePeer is a fakeImpl whose driver copies directly to the peers it
// reaches, and counts what it was asked.
type fakePeer struct {
	*fakeImpl
	reach map[*fakeImpl]bool

	pmu                        sync.Mutex
	accessCalls, peerCopies    int
	plainCopies, asyncPeerCopy int
}

var _ plugin.PeerCopier = (*fakePeer)(nil)

func newFakePeer(name string, delay time.Duration) *fakePeer {
	return &fakePeer{fakeImpl: newFake(name, delay), reach: map[*fakeImpl]bool{}}
}

func (f *fakePeer) PeerAccess(peer plugin.Impl) (bool, error) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	f.accessCalls++
	p, ok := peer.(*fakePeer)
	return ok && f.reach[p.fakeImpl], nil
}

func (f *fakePeer) CopyPeer(dst uintptr, dstDev plugin.Impl, src uintptr, srcDev plugin.Impl, n uintptr, q plugin.QueueImpl) error {
	f.pmu.Lock()
	f.peerCopies++
	if q != nil {
		f.asyncPeerCopy++
	}
	f.pmu.Unlock()
	// plugin.PeerCopier.CopyPeer's contract: the generic layer checked all
	// of this (TestPeerCopyChecksAreGeneric), and calls the receiver with
	// itself as one side and a peer PeerAccess answered true for.
	other := dstDev
	if other == plugin.Impl(f) {
		other = srcDev
	}
	op, isPeer := other.(*fakePeer)
	fq, isFake := q.(*fakeQueue)
	if n == 0 || dst == 0 || src == 0 || dst+n < dst || src+n < src ||
		(dstDev != plugin.Impl(f) && srcDev != plugin.Impl(f)) || !isPeer || !f.reaches(op) ||
		(q != nil && (!isFake || fq.f != f.fakeImpl)) {
		f.contractBreaks.Add(1)
		return errInjected
	}
	run := func() { cmem.Copy(dst, src, n) }
	if q == nil {
		run()
		return nil
	}
	q.(*fakeQueue).enqueue(run)
	return nil
}

func (f *fakePeer) reaches(p *fakePeer) bool {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	return f.reach[p.fakeImpl]
}

func (f *fakePeer) Copy(dst, src, n uintptr, dir plugin.Direction, q plugin.QueueImpl) error {
	f.pmu.Lock()
	f.plainCopies++
	f.pmu.Unlock()
	return f.fakeImpl.Copy(dst, src, n, dir, q)
}

func (f *fakePeer) stats() (access, peer, async, plain int) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	return f.accessCalls, f.peerCopies, f.asyncPeerCopy, f.plainCopies
}

func TestMemcpyPeer(t *testing.T) {
	a, b, c := newFakePeer("a", 0), newFakePeer("b", 0), newFakePeer("c", 0)
	a.reach[b.fakeImpl], b.reach[a.fakeImpl] = true, true // a and b reach each other; c reaches nobody
	withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{a, b, c}})
	const n = 1 << 20
	bufs := make([]uintptr, 3)
	for dev := range 3 {
		d, err := Get(dev)
		require.NoError(t, err)
		bufs[dev], err = d.Alloc(MemDevice, n)
		require.NoError(t, err)
	}
	fill(bufs[0], n, 9)

	require.NoError(t, Memcpy(bufs[1], bufs[0], n, 1, 0))
	require.True(t, hasFill(bufs[1], n, 9))
	_, peer, _, plain := a.stats()
	require.Equal(t, 1, peer, "a → b went device to device, on the source")
	require.Zero(t, plain)
	_, _, _, plain = b.stats()
	require.Zero(t, plain, "no host bounce")

	require.NoError(t, Memcpy(bufs[2], bufs[1], n, 2, 1))
	require.True(t, hasFill(bufs[2], n, 9))
	access, peer, _, plain := b.stats()
	require.Zero(t, peer, "b → c bounced: b does not reach c")
	require.Equal(t, 1, access)
	require.NotZero(t, plain, "b → c went through the host")
}

func TestMemcpyAsyncPeer(t *testing.T) {
	a, b := newFakePeer("a", time.Millisecond), newFakePeer("b", time.Millisecond)
	a.reach[b.fakeImpl], b.reach[a.fakeImpl] = true, true
	withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{a, b, newFake("c", 0)}})
	t.Cleanup(a.release)
	t.Cleanup(b.release)
	da, _ := Get(0)
	db, _ := Get(1)
	const n = 64 << 10
	src, err := da.Alloc(MemDevice, n)
	require.NoError(t, err)
	dst, err := db.Alloc(MemDevice, n)
	require.NoError(t, err)
	fill(src, n, 3)

	// On the destination's queue: the receiver is b, and the copy runs late.
	q, err := db.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	b.holdWork()
	require.NoError(t, MemcpyAsync(dst, src, n, 1, 0, q))
	require.False(t, hasFill(dst, n, 3), "the copy was enqueued, not done at once")
	b.release()
	require.NoError(t, q.Synchronize(context.Background()))
	require.True(t, hasFill(dst, n, 3))
	_, _, async, _ := b.stats()
	require.Equal(t, 1, async)

	// Host to device and back on the same queue, in order.
	h := hostMem(t, n)
	fill(h, n, 4)
	back := hostMem(t, n)
	require.NoError(t, MemcpyAsync(dst, h, n, 1, InitialDevice(), q))
	require.NoError(t, MemcpyAsync(back, dst, n, InitialDevice(), 1, q))
	require.NoError(t, q.Synchronize(context.Background()))
	require.True(t, hasFill(back, n, 4))

	// A queue of neither device, or none.
	dc, _ := Get(2)
	qc, err := dc.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, qc.Close()) }()
	require.ErrorIs(t, MemcpyAsync(dst, src, n, 1, 0, qc), ErrInvalidArgument)
	require.ErrorIs(t, MemcpyAsync(dst, src, n, 1, 0, nil), ErrInvalidArgument)

	// Across plugins' kinds (c is no PeerCopier): through the host, complete on return.
	cbuf, err := dc.Alloc(MemDevice, n)
	require.NoError(t, err)
	require.NoError(t, MemcpyAsync(cbuf, dst, n, 2, 1, q))
	require.True(t, hasFill(cbuf, n, 4))
}

// Two accelerators that cannot copy directly: the bytes go through host
// buffers pinned for both devices, so every copy of the bounce takes the
// pinned path, and nothing stays locked afterwards.
func TestMemcpyBouncesThroughPinned(t *testing.T) {
	a, b := newFake("a", 100*time.Microsecond), newFake("b", 100*time.Microsecond)
	withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{a, b}})
	da, _ := Get(0)
	db, _ := Get(1)
	const n = 2*bounceChunk + 12345 // three chunks, the last one short
	src, err := da.Alloc(MemDevice, n)
	require.NoError(t, err)
	dst, err := db.Alloc(MemDevice, n)
	require.NoError(t, err)
	fill(src, n, 6)

	require.NoError(t, Memcpy(dst, src, n, 1, 0))
	require.True(t, hasFill(dst, n, 6))
	for _, f := range []*fakeImpl{a, b} {
		locks, unlocks, pinned, _ := f.counts()
		require.Equal(t, 3, pinned, "%s: each chunk's copy had a pinned host side", f.name)
		require.Equal(t, 1, locks, "%s: the bounce buffers were locked once", f.name)
		require.Equal(t, 1, unlocks)
	}
	require.Zero(t, da.Registry().Stats().Entries)
	require.Zero(t, db.Registry().Stats().Entries)

	// A lock that fails is an error naming it; pageable memory is not used instead.
	b.failLock.Store(true)
	err = Memcpy(dst, src, n, 1, 0)
	require.ErrorIs(t, err, errInjected)
	require.ErrorContains(t, err, "memcpy of")
	require.ErrorContains(t, err, "pin the bounce buffers")
	b.failLock.Store(false)
	require.Zero(t, da.Registry().Stats().Entries, "the source's lock was undone")
}
