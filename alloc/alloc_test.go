package alloc

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

func mustNew(t *testing.T, ms memspace.ID, opts ...Option) *Allocator {
	t.Helper()
	a, err := New(ms, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	return a
}

func fill(p unsafe.Pointer, n uintptr, v byte) {
	b := cmem.Bytes(uintptr(p), n)
	for i := range b {
		b[i] = v
	}
}

func allIs(p unsafe.Pointer, n uintptr, v byte) bool {
	for _, x := range cmem.Bytes(uintptr(p), n) {
		if x != v {
			return false
		}
	}
	return true
}

func TestPredefinedAllocatorsServeHostMemory(t *testing.T) {
	for _, h := range []handle{predef.DefaultMem, predef.LargeCapMem, predef.ConstMem, predef.HighBwMem, predef.LowLatMem, predef.CgroupMem, predef.PteamMem, predef.ThreadMem} {
		t.Run(predef.Name(uintptr(h)), func(t *testing.T) {
			a, ok := lookup(h)
			require.True(t, ok)
			require.Equal(t, predef.Name(uintptr(h)), a.String())
			p, err := a.Alloc(100)
			require.NoError(t, err)
			require.Zero(t, uintptr(p)%16)
			fill(p, 100, 0xab)
			o, err := ownerOf(p)
			require.NoError(t, err)
			require.Same(t, a, o)
			require.NoError(t, Free(p))
			require.ErrorIs(t, a.Destroy(), ErrInvalidArgument, "predefined allocators cannot be destroyed")
		})
	}
	_, ok := lookup(9)
	require.False(t, ok)
	_, ok = lookup(1 << 40)
	require.False(t, ok)
}

func TestInvalidTraits(t *testing.T) {
	dead, err := New(memspace.Default)
	require.NoError(t, err)
	require.NoError(t, dead.Destroy())

	tests := []struct {
		name   string
		ms     memspace.ID
		traits []traits.Trait
		want   error
		names  string
	}{
		{"unknown key", memspace.Default, []traits.Trait{{Key: 999, Value: 1}}, ErrInvalidTrait, "999"},
		{"alignment not a power of two", memspace.Default, []traits.Trait{{Key: traits.Alignment, Value: 48}}, ErrInvalidTrait, "alignment"},
		{"bad fallback value", memspace.Default, []traits.Trait{{Key: traits.Fallback, Value: 3}}, ErrInvalidTrait, "fallback"},
		{"allocator_fb without fb_data", memspace.Default, []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}}, ErrInvalidTrait, "fb_data"},
		{"fb_data not an allocator", memspace.Default, []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 77777}}, ErrInvalidTrait, "fb_data"},
		{"fb_data destroyed", memspace.Default, []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: uintptr(dead.handle())}}, ErrInvalidTrait, "fb_data"},
		{"pinned=2", memspace.Default, []traits.Trait{{Key: traits.Pinned, Value: 2}}, ErrInvalidTrait, "pinned"},
		{"null memspace", memspace.Null, nil, ErrInvalidArgument, "memory space"},
		{"unknown memspace", memspace.ID(55), nil, ErrInvalidArgument, "memory space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewFromTraits(tc.ms, tc.traits)
			require.Nil(t, a)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.names)
		})
	}
}

func TestFallbackChainsCannotLoop(t *testing.T) {
	// Fallbacks bind to allocators that exist when the new one is made, so
	// a chain cannot loop. The one way to try — destroy A, let C reuse its
	// handle, make A's old dependant B the fallback of C — must not make B
	// fall back to C.
	setReuseDelay(t, 0) // C gets A's number at once
	a, err := New(memspace.Default, WithPoolSize(4096), WithFallback(traits.NullFb))
	require.NoError(t, err)
	b := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallbackAllocator(a))
	require.NoError(t, a.Destroy())
	c := mustNew(t, memspace.Default, WithFallbackAllocator(b))
	require.Equal(t, a.id, c.id, "handle numbers are reused")
	_, err = b.Alloc(8192)
	require.ErrorIs(t, err, ErrPoolExhausted, "a destroyed fallback ends the chain; it does not lead to C")
	p, err := c.Alloc(8192) // C's own memory serves it
	require.NoError(t, err)
	require.NoError(t, Free(p))
}

func TestAlignment(t *testing.T) {
	for _, trait := range []uintptr{1, 16, 64, 4096, 1 << 20} {
		a := mustNew(t, memspace.Default, WithAlignment(trait))
		for _, arg := range []uintptr{1, 8, 32, 256, 64 << 10, 2 << 20} {
			for _, size := range []uintptr{1, 64, 5000, 300 << 10} {
				want := max(trait, arg, 16)
				p, err := a.AlignedAlloc(arg, size)
				require.NoError(t, err)
				require.Zero(t, uintptr(p)%want, "trait %d arg %d size %d: %p", trait, arg, size, p)
				fill(p, size, 1)
				require.NoError(t, Free(p))
			}
		}
	}
	_, err := Default().AlignedAlloc(24, 8)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestSizeZeroAndCalloc(t *testing.T) {
	a := Default()
	p, err := a.Alloc(0)
	require.NoError(t, err)
	require.Nil(t, p)
	for _, tc := range []struct{ n, size uintptr }{{0, 8}, {8, 0}} {
		p, err := a.Calloc(tc.n, tc.size)
		require.NoError(t, err)
		require.Nil(t, p)
	}
	_, err = a.Calloc(math.MaxUint64/2, 4)
	require.ErrorIs(t, err, ErrOverflow)
	_, err = a.AlignedCalloc(64, 1<<33, 1<<33)
	require.ErrorIs(t, err, ErrOverflow)

	// Dirty a block, free it, and calloc the same class: it must read zero.
	p, err = a.Alloc(1000)
	require.NoError(t, err)
	fill(p, 1000, 0xff)
	require.NoError(t, Free(p))
	for _, n := range []uintptr{1000, 200 << 10, 3 << 20} {
		q, err := a.AlignedCalloc(64, n/8, 8)
		require.NoError(t, err)
		require.Zero(t, uintptr(q)%64)
		require.True(t, allIs(q, n, 0), "calloc of %d", n)
		fill(q, n, 0xee)
		require.NoError(t, Free(q))
	}
}

func TestPoolSizeIsAQuotaOnFootprint(t *testing.T) {
	// LLVM's omp_alloc_null_fb / omp_alloc_def_fb: 2 MiB pool, 1 MiB
	// blocks: the second does not fit, because the footprint exceeds 1 MiB.
	tests := []struct {
		name     string
		fb       Option
		wantErr  error
		fallback bool
	}{
		{"null_fb", WithFallback(traits.NullFb), ErrPoolExhausted, false},
		{"default_mem_fb", WithFallback(traits.DefaultMemFb), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := mustNew(t, memspace.Default, WithPoolSize(2<<20), tc.fb)
			p1, err := a.Alloc(1 << 20)
			require.NoError(t, err)
			p2, err := a.Alloc(1 << 20)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, p2)
				require.ErrorContains(t, err, "2097152")
			} else {
				require.NoError(t, err)
				o, err := ownerOf(p2)
				require.NoError(t, err)
				require.Equal(t, handle(predef.DefaultMem), o.handle(), "the second block came from omp_default_mem_alloc")
				require.NoError(t, Free(p2))
			}
			st := a.Stats()
			require.Equal(t, int64(1), st.BlocksLive)
			require.Greater(t, st.PoolUsed, int64(1<<20))
			require.Equal(t, tc.fallback, st.Fallbacks == 1)
			require.NoError(t, Free(p1))
			require.Zero(t, a.Stats().PoolUsed)
			// The room freed is usable again.
			p3, err := a.Alloc(1 << 20)
			require.NoError(t, err)
			require.NoError(t, Free(p3))
		})
	}
}

func TestAllocatorFallbackChain(t *testing.T) {
	last := mustNew(t, memspace.Default, WithPoolSize(64<<10), WithFallback(traits.NullFb))
	mid := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallbackAllocator(last))
	first := mustNew(t, memspace.Default, WithPoolSize(1024), WithFallbackAllocator(mid))
	for _, tc := range []struct {
		size uintptr
		want *Allocator
	}{{100, first}, {2000, mid}, {20000, last}} {
		p, err := first.Alloc(tc.size)
		require.NoError(t, err)
		o, err := ownerOf(p)
		require.NoError(t, err)
		require.Same(t, tc.want, o, "size %d", tc.size)
		require.NoError(t, first.Free(p))
	}
	_, err := first.Alloc(1 << 20)
	require.ErrorIs(t, err, ErrPoolExhausted, "the chain ends in null_fb")
}

func TestAbortFallbackPanicsWithReason(t *testing.T) {
	a := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallback(traits.AbortFb))
	require.PanicsWithValue(t,
		fmt.Sprintf("ompalloc: %v: abort_fb: allocation of 8192 bytes failed: %v", a, errorOf(a.try(8192, 0, false))),
		func() { _, _ = a.Alloc(8192) })
}

func errorOf(_ unsafe.Pointer, err error) error { return err }

func TestRealloc(t *testing.T) {
	a := Default()
	b := mustNew(t, memspace.Default, WithAlignment(256))

	p, err := realloc(nil, 100, a)
	require.NoError(t, err)
	fill(p, 100, 7)
	q, err := realloc(p, 5000, b) // grow, moving to another allocator
	require.NoError(t, err)
	require.True(t, allIs(q, 100, 7))
	require.Zero(t, uintptr(q)%256)
	o, _ := ownerOf(q)
	require.Same(t, b, o)
	require.ErrorIs(t, Free(p), ErrDoubleFree, "realloc freed the old block")
	r, err := realloc(q, 10, nil) // shrink within its own allocator
	require.NoError(t, err)
	require.True(t, allIs(r, 10, 7))
	o, _ = ownerOf(r)
	require.Same(t, b, o)
	n, err := blockSize(r)
	require.NoError(t, err)
	require.Equal(t, uintptr(10), n)

	// Failure leaves the old block intact.
	small := mustNew(t, memspace.Default, WithPoolSize(8192), WithFallback(traits.NullFb))
	s, err := small.Alloc(1000)
	require.NoError(t, err)
	fill(s, 1000, 9)
	_, err = realloc(s, 1<<20, nil)
	require.ErrorIs(t, err, ErrPoolExhausted)
	require.True(t, allIs(s, 1000, 9))
	require.NoError(t, Free(s))

	z, err := realloc(r, 0, nil)
	require.NoError(t, err)
	require.Nil(t, z)
	require.ErrorIs(t, Free(r), ErrDoubleFree, "size 0 freed it")
}

func TestBadFreesChangeNothing(t *testing.T) {
	a := Default()
	live, err := a.Alloc(64)
	require.NoError(t, err)
	fill(live, 64, 5)
	var goMem [128]byte
	big, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	freed, err := a.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, Free(freed))

	require.NoError(t, Free(nil))
	for _, tc := range []struct {
		name string
		p    unsafe.Pointer
		want error
	}{
		{"go memory", unsafe.Pointer(&goMem[16]), ErrInvalidPointer},
		{"interior small", unsafe.Add(live, 16), ErrInvalidPointer},
		{"interior large", unsafe.Add(big, 4096), ErrInvalidPointer},
		{"double free", freed, ErrDoubleFree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, Free(tc.p), tc.want)
		})
	}
	require.True(t, allIs(live, 64, 5))
	require.NoError(t, Free(live))
	require.NoError(t, Free(big))
}

func TestDestroyWithLiveBlocks(t *testing.T) {
	a, err := New(memspace.Default, WithPoolSize(1<<20))
	require.NoError(t, err)
	ps := make([]unsafe.Pointer, 3)
	for i := range ps {
		ps[i], err = a.Alloc(1000)
		require.NoError(t, err)
		fill(ps[i], 1000, byte(i))
	}
	err = a.Destroy()
	require.ErrorIs(t, err, ErrLiveBlocks)
	require.ErrorContains(t, err, "3 blocks")
	_, ok := lookup(a.handle())
	require.False(t, ok, "a destroyed allocator is no longer looked up")
	_, err = a.Alloc(10)
	require.ErrorIs(t, err, ErrDestroyed)
	for i, p := range ps {
		require.True(t, allIs(p, 1000, byte(i)), "live blocks stay valid")
		require.NoError(t, Free(p))
	}
	require.ErrorIs(t, a.Destroy(), ErrDestroyed)
}

func TestStats(t *testing.T) {
	a := mustNew(t, memspace.Default)
	var ps []unsafe.Pointer
	for i := 0; i < 100; i++ {
		p, err := a.Alloc(1000)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	st := a.Stats()
	require.Equal(t, uint64(100), st.Allocs)
	require.Equal(t, int64(100), st.BlocksLive)
	require.Equal(t, int64(100*1000), st.BytesLive)
	require.GreaterOrEqual(t, st.FootprintLive, int64(100*1008)) // size + the 8-byte header, rounded to 16
	require.GreaterOrEqual(t, st.PeakBytes, int64(100*1000))
	for _, p := range ps {
		require.NoError(t, Free(p))
	}
	st = a.Stats()
	require.Zero(t, st.BlocksLive)
	require.Zero(t, st.BytesLive)
	require.Zero(t, st.FootprintLive)
	require.Equal(t, int64(100*1000), st.PeakBytes)
}

func TestMake(t *testing.T) {
	a := Default()
	xs, err := Make[float32](a, 1000)
	require.NoError(t, err)
	require.Len(t, xs, 1000)
	require.Equal(t, 1000, cap(xs))
	for i := range xs {
		require.Zero(t, xs[i])
		xs[i] = float32(i)
	}
	ys := append(xs, 1) // beyond cap: copied to the Go heap, no overrun
	require.NotEqual(t, uintptr(unsafe.Pointer(unsafe.SliceData(xs))), uintptr(unsafe.Pointer(unsafe.SliceData(ys))))
	require.NoError(t, FreeSlice(a, xs))

	type pair struct {
		A int64
		B [2]float64
	}
	ps, err := Make[pair](a, 3)
	require.NoError(t, err)
	require.NoError(t, FreeSlice(a, ps))

	_, err = Make[*int](a, 3)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = Make[struct{ S string }](a, 3)
	require.ErrorContains(t, err, "Go pointers")
	_, err = Make[int](a, -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	e, err := Make[int](a, 0)
	require.NoError(t, err)
	require.Nil(t, e)
	require.NoError(t, FreeSlice(a, e))
}

func TestConcurrentHammer(t *testing.T) {
	allocs := []*Allocator{
		Default(),
		mustNew(t, memspace.Default, WithAlignment(64)),
		mustNew(t, memspace.LargeCap, WithPoolSize(8<<20), WithFallback(traits.DefaultMemFb)),
		mustNew(t, memspace.HighBw, WithAlignment(4096)),
	}
	const workers, rounds = 6, 2000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			type blk struct {
				p   unsafe.Pointer
				n   uintptr
				tag byte
			}
			var live []blk
			check := func(b blk) error {
				if !allIs(b.p, b.n, b.tag) {
					return fmt.Errorf("worker %d: block %p of %d bytes corrupted", w, b.p, b.n)
				}
				return nil
			}
			for i := 0; i < rounds; i++ {
				a := allocs[(i+w)%len(allocs)]
				n := uintptr((i*131+w*17)%5000 + 1)
				if i%200 == 0 {
					n = 300 << 10
				}
				tag := byte(i + w)
				switch {
				case i%5 == 4 && len(live) > 0: // realloc
					k := i % len(live)
					b := live[k]
					if err := check(b); err != nil {
						errs <- err
						return
					}
					np, err := realloc(b.p, n, a)
					if err != nil {
						errs <- err
						return
					}
					keep := min(n, b.n)
					if !allIs(np, keep, b.tag) {
						errs <- fmt.Errorf("worker %d: realloc lost data", w)
						return
					}
					fill(np, n, tag)
					live[k] = blk{np, n, tag}
				default:
					p, err := a.Alloc(n)
					if err != nil {
						errs <- err
						return
					}
					fill(p, n, tag)
					live = append(live, blk{p, n, tag})
				}
				if len(live) > 40 {
					b := live[0]
					live = live[1:]
					if err := check(b); err != nil {
						errs <- err
						return
					}
					if err := Free(b.p); err != nil {
						errs <- err
						return
					}
				}
			}
			for _, b := range live {
				if err := check(b); err != nil {
					errs <- err
					return
				}
				if err := Free(b.p); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, a := range allocs[1:] {
		require.Zero(t, a.Stats().BlocksLive, "%v", a)
	}
}

// TestReallocInPlace: a realloc that stays within the block's size class or
// page run keeps the pointer (no copy), with Stats and the quota still
// exact; one that leaves them, or goes to another allocator, moves.
func TestReallocInPlace(t *testing.T) {
	pool := mustNew(t, memspace.Default, WithPoolSize(8<<20))
	other := mustNew(t, memspace.Default)
	for _, tc := range []struct {
		name     string
		a        *Allocator
		from, to uintptr
		into     *Allocator // nil: the block's own
		inPlace  bool
	}{
		{"small grows within its class", Default(), 100, 104, nil, true},
		{"small shrinks within its class", Default(), 104, 100, nil, true},
		{"small grows past its class", Default(), 100, 200, nil, false},
		{"small shrinks to a smaller class", Default(), 1000, 16, nil, false},
		{"medium grows within its pages", Default(), 100 << 10, 120 << 10, nil, true},
		{"medium grows past its pages", Default(), 100 << 10, 200 << 10, nil, false},
		{"medium shrinks to small", Default(), 100 << 10, 100, nil, false},
		{"pool allocator, quota unchanged", pool, 100 << 10, 110 << 10, nil, true},
		{"into another allocator", Default(), 100, 110, other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.a.Alloc(tc.from)
			require.NoError(t, err)
			fill(p, tc.from, 3)
			before, used := tc.a.Stats(), tc.a.Stats().PoolUsed
			q, err := realloc(p, tc.to, tc.into)
			require.NoError(t, err)
			require.Equal(t, tc.inPlace, q == p, "in place")
			require.True(t, allIs(q, min(tc.from, tc.to), 3))
			n, err := blockSize(q)
			require.NoError(t, err)
			require.Equal(t, tc.to, n)
			if tc.inPlace {
				after := tc.a.Stats()
				require.Equal(t, before.BytesLive+int64(tc.to)-int64(tc.from), after.BytesLive)
				require.Equal(t, before.FootprintLive, after.FootprintLive)
				require.Equal(t, before.BlocksLive, after.BlocksLive)
				require.Equal(t, used, after.PoolUsed)
			} else {
				require.ErrorIs(t, Free(p), ErrDoubleFree, "the old block was freed")
			}
			require.NoError(t, Free(q))
		})
	}
	require.Zero(t, pool.Stats().PoolUsed)
}

// TestHandleLimit: handles stop at 65535 (a small block's header keeps its
// owner in 16 bits): past it New says so, and freed handles are still
// reused.
func TestHandleLimit(t *testing.T) {
	initOnce.Do(initPredefined)
	tableMu.Lock()
	saved, savedFree := nextID, freeIDs
	nextID, freeIDs = maxHandle+1, nil
	tableMu.Unlock()
	t.Cleanup(func() {
		tableMu.Lock()
		nextID, freeIDs = saved, append(savedFree, freeIDs...)
		tableMu.Unlock()
	})
	_, err := New(memspace.Default)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "too many allocators")
	tableMu.Lock()
	freeIDs = append(freeIDs, maxHandle)
	tableMu.Unlock()
	a, err := New(memspace.Default)
	require.NoError(t, err)
	require.Equal(t, maxHandle, a.handle())
	p, err := a.Alloc(100) // a small block: the owner fits its header
	require.NoError(t, err)
	o, err := ownerOf(p)
	require.NoError(t, err)
	require.Same(t, a, o)
	require.NoError(t, Free(p))
	require.NoError(t, a.Destroy())
}
