package heap

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// cachedRegions returns the bases of the huge regions every P's cache of h
// keeps. Only for a quiet heap: the caches are read without their Ps (the
// race detector sees the guards).
func cachedRegions(h *Heap) []uintptr {
	var out []uintptr
	for _, pc := range *h.caches.Load() {
		pcpu.Pin()
		pc.guard.Lock()
		for _, s := range pc.regions[:pc.nregions] {
			out = append(out, s.base)
		}
		pc.guard.Unlock()
		pcpu.Unpin()
	}
	return out
}

// oneP runs the rest of the test on one P, for the tests that free and
// allocate again expecting the P that kept a region: with several, the
// scheduler may move the goroutine between the two calls.
func oneP(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

// Issue 30 item 3: a freed huge region is kept in the P's cache, counted as
// idle memory (Stats' Retained, FreeBlocks, Huge) while it is there, taken
// back by the next block of its size with the block counted in the owner's
// tally, and given back by Trim.
func TestHugeRegionCachedPerP(t *testing.T) {
	oneP(t)
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 64 << 20})
	t.Cleanup(h.Close)
	tl := NewTally()
	p, foot, err := h.AllocCounted(8<<20, 16, 7, false, tl)
	require.NoError(t, err)
	require.Equal(t, uintptr(8<<20+descSize), foot)
	require.Equal(t, TallySum{Allocs: 1, Bytes: 8 << 20, Foot: int64(foot)}, tl.Sum())
	SetTally(7, tl)
	t.Cleanup(func() { SetTally(7, nil) })
	require.NoError(t, FreeFast(p, false, nil))
	require.Equal(t, TallySum{Allocs: 1, Frees: 1}, tl.Sum(), "counted out in the pinned section that cached it")
	require.Equal(t, []uintptr{p}, cachedRegions(h), "the P keeps the region")
	st := h.Stats()
	require.Equal(t, uintptr(8<<20), st.Retained, "a cached region is idle memory")
	require.Equal(t, 1, st.FreeBlocks)
	require.Equal(t, 1, st.Huge)
	require.Equal(t, uintptr(8<<20), st.Mapped)

	_, err = Free(p)
	require.ErrorIs(t, err, ErrDoubleFree)
	require.ErrorIs(t, FreeFast(p, false, nil), ErrDoubleFree)
	_, err = Inspect(p)
	require.ErrorIs(t, err, ErrDoubleFree)

	q, _, err := h.AllocCounted(8<<20-100, 16, 7, true, tl)
	require.NoError(t, err)
	require.Equal(t, p, q, "the cached region is reused (same P)")
	require.Zero(t, cmem.Bytes(q, 8<<20)[4<<20], "zeroed on request")
	require.Empty(t, cachedRegions(h))
	require.Zero(t, h.Stats().Retained)
	_, err = Free(q)
	require.NoError(t, err)

	h.Trim()
	st = h.Stats()
	require.Zero(t, st.Mapped, "Trim gives cached regions back")
	require.Zero(t, st.Retained)
	require.Zero(t, st.Huge)
	require.Empty(t, cachedRegions(h))
	require.Zero(t, h.kept.Load(), "and every P's budget")
}

// A region kept by a P serves only blocks of its own heap: per-node heaps,
// NUMA placements and pinned pools each have their own caches.
func TestCachedRegionStaysWithItsHeap(t *testing.T) {
	a := New(MapSource{}, Config{Name: t.Name() + "-a", KeepHuge: 64 << 20})
	b := New(MapSource{}, Config{Name: t.Name() + "-b", KeepHuge: 64 << 20})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	p, _, err := a.Alloc(6<<20, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
	for range 20 {
		q, _, err := b.Alloc(6<<20, 16, 1, false)
		require.NoError(t, err)
		require.NotEqual(t, p, q, "another heap's cached region")
		blk, err := Inspect(q)
		require.NoError(t, err)
		require.Same(t, b, blk.Heap)
		_, err = Free(q)
		require.NoError(t, err)
	}
	require.Equal(t, uintptr(6<<20), a.Stats().Retained, "a's region is still a's, idle")
	require.Equal(t, uintptr(6<<20), b.Stats().Retained)
}

// wholeSource is a budgetSource that serves whole chunks only.
type wholeSource struct{ b *budgetSource }

func (s wholeSource) Acquire(n, align uintptr) (uintptr, error) { return s.b.Acquire(n, align) }
func (s wholeSource) Release(p, n uintptr) error                { return s.b.Release(p, n) }

// A region a P keeps must not make an allocation fail under a source limit
// (a pinned-bytes limit): when the source refuses, the heap gives its idle
// memory back and asks again, for a region and for a chunk alike. Before
// giveIdle both failed ("over budget"): the kept region held the room.
func TestIdleRegionsGivenBackUnderLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uintptr // the block that needs room the kept region holds
	}{
		{"region", 10 << 20},
		{"chunk", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole chunks only (not a PartialSource): a chunk needs 4 MiB
			// of the 2 the kept region leaves.
			src := wholeSource{&budgetSource{budget: 12 << 20}}
			h := New(src, Config{Name: t.Name(), KeepChunks: 1, KeepHuge: 64 << 20})
			t.Cleanup(h.Close)
			p, _, err := h.Alloc(10<<20, 16, 1, false)
			require.NoError(t, err)
			_, err = Free(p)
			require.NoError(t, err)
			require.Equal(t, uintptr(10<<20), h.Stats().Retained)
			// A bigger one does not fit the kept region: the source must
			// make room for it.
			big := tc.size
			if big > maxMedium {
				big = 11 << 20
			}
			q, _, err := h.Alloc(big, 16, 1, false)
			require.NoError(t, err, "the idle region is given back to make room")
			require.Zero(t, h.Stats().Retained)
			_, err = Free(q)
			require.NoError(t, err)
		})
	}
}

// KeepHuge bounds what the central list and every P's cache keep
// together (the budget handed out, at every moment); blocks are never
// handed out twice. Goroutines on every P allocate and
// free huge blocks of mixed sizes while a watcher reads Stats.
func TestHugeCachesBoundedAndExclusive(t *testing.T) {
	const keep = 24 << 20
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: keep})
	t.Cleanup(h.Close)
	procs := max(4, runtime.GOMAXPROCS(0))
	rounds := 300
	if testing.Short() {
		rounds = 100
	}
	var (
		live    sync.Map // base → goroutine
		stop    atomic.Bool
		wg      sync.WaitGroup
		watchWg sync.WaitGroup
		errs    = make(chan error, procs+1)
	)
	watchWg.Add(1)
	go func() {
		defer watchWg.Done()
		for !stop.Load() {
			// Retained also counts a region a racing Free has just let go
			// of and not yet kept or released (still mapped): only the
			// budget is bounded at every moment, Retained once frees end.
			if st := h.Stats(); st.Retained > st.Mapped {
				errs <- errors.New("Retained over Mapped")
				return
			}
			if k := h.kept.Load(); k > keep {
				errs <- errors.New("budget handed out over KeepHuge")
				return
			}
			runtime.Gosched()
		}
	}()
	sizes := []uintptr{3 << 20, 4 << 20, 6 << 20, 9 << 20}
	for g := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 30))
			for range rounds {
				size := sizes[r.IntN(len(sizes))]
				p, _, err := h.Alloc(size, 16, 1, false)
				if err != nil {
					errs <- err
					return
				}
				if _, dup := live.LoadOrStore(p, g); dup {
					errs <- errors.New("a live block handed out again")
					return
				}
				*(*uintptr)(cmem.Ptr(p + size - 8)) = p // the whole block is ours
				live.Delete(p)
				if _, err := Free(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	watchWg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := h.Stats()
	require.LessOrEqual(t, st.Retained, uintptr(keep))
	require.Equal(t, st.Retained, st.Mapped, "nothing live: every region held is idle")
	h.Trim()
	require.Zero(t, h.Stats().Mapped)
	require.Zero(t, h.kept.Load())
}

// Close gives every cached region back, and a block freed after it is
// released, not cached.
func TestCloseDrainsRegionCaches(t *testing.T) {
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 64 << 20})
	p, _, err := h.Alloc(5<<20, 16, 1, false)
	require.NoError(t, err)
	q, _, err := h.Alloc(5<<20, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
	h.Close()
	require.Equal(t, uintptr(5<<20), h.Stats().Mapped, "only the live block")
	_, err = Free(q)
	require.NoError(t, err)
	h.WaitReleases()
	require.Zero(t, h.Stats().Mapped)
	require.Empty(t, cachedRegions(h))
	_, _, err = h.Alloc(5<<20, 16, 1, false)
	require.ErrorIs(t, err, ErrClosed)
}

// Racing frees of one huge block: the span state's compare-and-swap lets
// exactly one win, whether the winner caches the region or not; the others
// get ErrDoubleFree. (No allocation runs meanwhile: a region reused between
// the frees would make the late one free the new block, as for any
// allocator.)
func TestRacingFreesOfCachedRegion(t *testing.T) {
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 64 << 20})
	t.Cleanup(h.Close)
	for range 200 {
		p, _, err := h.Alloc(3<<20, 16, 1, false)
		require.NoError(t, err)
		won, dup := racingFrees(p, 4)
		require.Equal(t, 1, won)
		require.Equal(t, 3, dup)
	}
	require.Equal(t, h.Stats().Mapped, h.Stats().Retained, "every region idle")
}

// A P that frees a huge block it did not serve (the consumer of a
// pipeline: another goroutine allocates) leaves the region to the central
// list, where the allocating P finds it, whatever P it runs on, instead of
// keeping it where that P never looks. Here Trim's fresh caches stand for
// a P that served nothing.
func TestFreeingPWithoutAllocsKeepsCentrally(t *testing.T) {
	oneP(t)
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 64 << 20})
	t.Cleanup(h.Close)
	tl := NewTally()
	SetTally(9, tl)
	t.Cleanup(func() { SetTally(9, nil) })
	p, _, err := h.AllocCounted(7<<20, 16, 9, false, tl)
	require.NoError(t, err)
	h.Trim() // every P's cache anew: none has served a huge block
	require.NoError(t, FreeFast(p, false, nil))
	require.Empty(t, cachedRegions(h), "not kept by a P that served no huge block")
	require.Equal(t, TallySum{Allocs: 1, Frees: 1}, tl.Sum())
	require.Equal(t, uintptr(7<<20), h.Stats().Retained)
	q, _, err := h.Alloc(7<<20, 16, 9, false)
	require.NoError(t, err)
	require.Equal(t, p, q, "the central list serves any P")
	_, err = Free(q)
	require.NoError(t, err)
	require.Equal(t, []uintptr{p}, cachedRegions(h), "the P that served it keeps it now")
}

// A region kept by a P the goroutine no longer runs on must not hold
// KeepHuge's budget for good: the goroutine's next free of a region,
// refused room, drains the P caches (a grace period, no collection) and
// keeps its own region centrally, where its next allocation finds it.
// Without the drain the new region was released, and every pair on the
// new P mapped and unmapped one (a 64 MiB buffer of the host heap, whose
// KeepHuge is 64 MiB, after the goroutine moved once).
func TestStrandedRegionDrained(t *testing.T) {
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 16 << 20})
	t.Cleanup(h.Close)
	cs := *h.caches.Load()
	if len(cs) < 2 {
		t.Skip("needs two Ps")
	}
	a, _, err := h.Alloc(16<<20, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(a)
	require.NoError(t, err)
	// The goroutine "moves": its P's region and credit go to another P's
	// cache, as if it had freed there.
	// The P that kept it: the goroutine may have moved since the free.
	pid := slices.IndexFunc(cs, func(pc *pcache) bool { return pc.nregions == 1 && pc.regions[0].base == a })
	require.GreaterOrEqual(t, pid, 0, "the freeing P kept it")
	pcpu.Pin()
	mine, other := cs[pid], cs[(pid+1)%len(cs)]
	mine.guard.Lock()
	other.guard.Lock()
	require.Equal(t, 1, mine.nregions, "the freeing P kept it")
	other.regions[other.nregions] = mine.regions[0]
	other.nregions++
	other.credit += mine.credit
	mine.regions[0], mine.nregions, mine.credit = nil, 0, 0
	other.guard.Unlock()
	mine.guard.Unlock()
	pcpu.Unpin()
	h.lastDrain.Store(0)

	b, _, err := h.Alloc(16<<20, 16, 1, false)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	_, err = Free(b)
	require.NoError(t, err)
	require.NotContains(t, cachedRegions(h), a, "the stranded region was drained")
	h.mu.Lock()
	central := slices.Clone(h.huge)
	h.mu.Unlock()
	kept := slices.ContainsFunc(central, func(s *span) bool { return s.base == b }) || slices.Contains(cachedRegions(h), b)
	require.True(t, kept, "the region just freed is kept")
	require.Equal(t, uintptr(16<<20), h.Stats().Retained)
	require.Equal(t, uintptr(16<<20), h.Stats().Mapped, "the stranded one went back")
}
