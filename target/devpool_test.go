package target

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPoolClass(t *testing.T) {
	for _, c := range []struct{ n, want uintptr }{
		{1, 512}, {512, 512}, {513, 640}, {1000, 1024}, {1025, 1280}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1<<18}, {3 << 20, 3 << 20},
	} {
		got := poolClass(c.n)
		require.Equal(t, c.want, got, "class of %d", c.n)
		require.GreaterOrEqual(t, got, c.n)
		require.LessOrEqual(t, got, max(512, c.n+c.n/4), "at most a quarter over")
	}
}

func TestDevicePoolReuseAndStats(t *testing.T) {
	f, d := withFake(t, 0)
	p, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	require.Equal(t, 1, f.live(MemDevice))
	st := d.poolStats()
	require.Equal(t, PoolStats{Reserved: 1 << 20, InUse: 1 << 20, Misses: 1, Allocs: 1}, st)

	require.NoError(t, d.PoolFree(p, nil))
	require.Equal(t, 1, f.live(MemDevice), "cached, not freed")
	st = d.poolStats()
	require.Equal(t, uintptr(1<<20), st.Reserved)
	require.Zero(t, st.InUse)
	require.Equal(t, 1, st.FreeBlocks)
	require.Zero(t, st.Waiting, "no queue: ready at once")

	p2, err := d.PoolAlloc(1<<20-100, nil) // same class
	require.NoError(t, err)
	require.Equal(t, p, p2)
	require.Equal(t, uint64(1), d.poolStats().Hits)
	require.Equal(t, 1, f.live(MemDevice))

	err = d.PoolFree(p2+8, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.NoError(t, d.PoolFree(p2, nil))
	require.ErrorIs(t, d.PoolFree(p2, nil), ErrInvalidArgument, "a double free")
	_, err = d.PoolAlloc(0, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)

	require.Equal(t, uintptr(1<<20), d.TrimPool(0))
	require.Zero(t, f.live(MemDevice))
	require.Equal(t, PoolStats{Hits: 1, Misses: 1, Released: 1, Allocs: 2}, d.poolStats())
}

// A block freed after use on queue A is reused by A at once, by anyone
// else only after A's work issued before the free completed.
func TestDevicePoolQueueOrder(t *testing.T) {
	f, d := withFake(t, 0)
	qa, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, qa.Close()) })
	qb, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, qb.Close()) })
	t.Cleanup(f.release)

	p, err := d.PoolAlloc(4096, qa)
	require.NoError(t, err)
	f.holdWork()
	src := make([]byte, 4096)
	arr, err := arrayOf[byte](memory{Device: d, Kind: MemDevice, Addr: p, Size: 4096})
	require.NoError(t, err)
	require.NoError(t, CopyToDevice(arr, src, qa)) // A's work uses the block, held
	require.NoError(t, d.PoolFree(p, qa))
	require.Equal(t, 1, d.poolStats().Waiting)

	pa, err := d.PoolAlloc(4096, qa)
	require.NoError(t, err)
	require.Equal(t, p, pa, "the same queue reuses at once: its later work runs after")
	require.NoError(t, d.PoolFree(pa, qa))

	pb, err := d.PoolAlloc(4096, qb)
	require.NoError(t, err)
	require.NotEqual(t, p, pb, "another queue must not get the block before A's work is done")
	pn, err := d.PoolAlloc(4096, nil)
	require.NoError(t, err)
	require.NotEqual(t, p, pn)
	require.NoError(t, d.PoolFree(pb, nil))
	require.NoError(t, d.PoolFree(pn, nil))

	// Freed without a queue, they wait for every queue's work (A's is held).
	require.Zero(t, d.TrimPool(0), "nothing waiting is released")
	require.Equal(t, 3, d.poolStats().FreeBlocks)
	require.Equal(t, 3, d.poolStats().Waiting)

	f.release()
	require.NoError(t, qa.Synchronize(context.Background()))
	require.Equal(t, 2, d.poolStats().Waiting, "the blocks freed without a queue wait for idle B's query too")
	got, err := d.PoolAlloc(4096, qb)
	require.NoError(t, err)
	require.Equal(t, p, got, "reusable by anyone once A's work is done")
	got2, err := d.PoolAlloc(4096, nil) // a miss: B is queried first, its blocks become ready
	require.NoError(t, err)
	require.Contains(t, []uintptr{pb, pn}, got2)
	require.Equal(t, 3, f.live(MemDevice), "no new driver allocation")
	require.Zero(t, d.poolStats().Waiting)
	require.NoError(t, d.PoolFree(got2, nil))
	require.NoError(t, d.PoolFree(got, nil))
	d.TrimPool(0)
}

func TestDevicePoolLimit(t *testing.T) {
	f, d := withFake(t, 0)
	d.SetPoolLimit(1 << 20)
	t.Cleanup(func() { d.SetPoolLimit(0); d.TrimPool(0) })
	a, err := d.PoolAlloc(512<<10, nil)
	require.NoError(t, err)
	b, err := d.PoolAlloc(512<<10, nil)
	require.NoError(t, err)
	_, err = d.PoolAlloc(4096, nil)
	require.ErrorIs(t, err, ErrPoolLimit)
	require.ErrorContains(t, err, "1048576 of 1048576 bytes reserved")
	require.NoError(t, d.PoolFree(a, nil))
	// Another class at the limit: the ready free block goes back first.
	c, err := d.PoolAlloc(256<<10, nil)
	require.NoError(t, err)
	st := d.poolStats()
	require.Equal(t, uintptr(768<<10), st.Reserved)
	require.Equal(t, uint64(1), st.Released)
	require.Equal(t, 2, f.live(MemDevice))
	require.NoError(t, d.PoolFree(b, nil))
	require.NoError(t, d.PoolFree(c, nil))
	d.SetPoolLimit(256 << 10)
	require.Equal(t, uintptr(256<<10), d.poolStats().Reserved, "a lower limit gives back what is over it")
}

// Issue 27 item 2: PoolArray is the typed PoolAlloc: a reused block costs
// no driver call, Free gives it back to the pool, and one freed with
// FreeOn(q) is reused by q at once.
func TestAllocArrayUsesThePool(t *testing.T) {
	f, d := withFake(t, 0)
	a, err := PoolArray[float32](d, 1000, nil)
	require.NoError(t, err)
	require.Equal(t, 1000, a.Len())
	require.Equal(t, uintptr(4096), d.poolStats().InUse, "4000 bytes, in the 4096-byte class")
	require.NoError(t, a.Free())
	require.Equal(t, 1, f.live(MemDevice), "cached, not freed")
	b, err := PoolArray[float32](d, 1000, nil)
	require.NoError(t, err)
	require.Equal(t, a.m.Addr, b.m.Addr)
	require.Equal(t, uint64(1), d.poolStats().Hits)
	require.NoError(t, b.Free())
	require.ErrorIs(t, b.Free(), ErrInvalidArgument, "a double free")

	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	c, err := PoolArray[int64](d, 512, q)
	require.NoError(t, err)
	require.NoError(t, c.FreeOn(q))
	c2, err := PoolArray[int64](d, 512, q)
	require.NoError(t, err)
	require.Equal(t, c.m.Addr, c2.m.Addr, "q reuses what it freed at once")
	require.NoError(t, c2.FreeOn(nil))
	_, err = PoolArray[int64](d, 0, q)
	require.ErrorIs(t, err, ErrInvalidArgument)

	h, err := AllocArray[byte](d, MemHost, 64)
	require.NoError(t, err)
	require.NoError(t, h.FreeOn(q), "other memory is freed after q's work")
	require.NoError(t, q.Synchronize(context.Background()))
	require.Zero(t, f.live(MemHost))
	require.Equal(t, uintptr(4096), d.TrimPool(0))
}
