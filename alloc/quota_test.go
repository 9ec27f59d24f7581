package alloc

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 9, item 7: a reused huge region larger than the block needs never
// takes PoolUsed above pool_size.
func TestPoolNeverExceededByReusedHugeRegion(t *testing.T) {
	Trim()
	const pool = 7864320 // 7.5 MiB
	// An 8 MiB region, freed and kept by the host heap.
	big := mustNew(t, memspace.Default)
	p, err := big.Alloc(8 << 20)
	require.NoError(t, err)
	require.NoError(t, Free(p))

	a := mustNew(t, memspace.Default, WithPoolSize(pool), WithFallback(traits.NullFb))
	q, err := a.Alloc(7 << 20) // fits the kept 8 MiB region (within a quarter)
	require.NoError(t, err)
	st := a.Stats()
	require.LessOrEqual(t, st.PoolUsed, int64(pool), "PoolUsed %d > PoolSize %d", st.PoolUsed, pool)
	require.Positive(t, st.PoolUsed)
	require.Equal(t, st.FootprintLive, st.PoolUsed, "charged what it occupies (issue 29 item 12)")
	require.NoError(t, Free(q))
	require.Zero(t, a.Stats().PoolUsed, "what was charged is given back")
	require.NoError(t, a.Destroy())
	require.NoError(t, big.Destroy())
	Trim()
}

// Issue 9, item 7: pool_size holds on the target memory spaces too.
func TestPoolSizeOnTargetMemspaces(t *testing.T) {
	for _, ms := range []memspace.ID{memspace.TargetHost, memspace.TargetShared, memspace.TargetDevice} {
		t.Run(ms.String(), func(t *testing.T) {
			a := mustNew(t, ms, WithPoolSize(4096), WithFallback(traits.NullFb))
			defer func() { require.NoError(t, a.Destroy()) }()
			_, err := a.Alloc(1 << 20)
			require.ErrorIs(t, err, ErrPoolExhausted)
			p, err := a.Alloc(4000)
			require.NoError(t, err)
			require.Equal(t, int64(4000), a.Stats().PoolUsed)
			_, err = a.Alloc(200)
			require.ErrorIs(t, err, ErrPoolExhausted)
			require.NoError(t, Free(p))
			require.Zero(t, a.Stats().PoolUsed)
		})
	}
}

// Issue 9, item 7: OMPALLOC_PINNED_LIMIT parses the same way every time;
// overflow and junk are errors, and the limit stays the default with one
// warning line.
func TestPinnedLimitParsing(t *testing.T) {
	good := map[string]uintptr{
		"0": 0, "4096": 4096, " 64k ": 64 << 10, "1M": 1 << 20, "3G": 3 << 30, "2t": 2 << 40,
		"8388607T": 8388607 << 40, "12KB": 12 << 10, "1 G": 1 << 30, "4MiB": 4 << 20,
	}
	for in, want := range good {
		for i := 0; i < 20; i++ { // once parsed by map iteration order: same answer every time
			got, err := parseSize(in)
			require.NoError(t, err, in)
			require.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"16777216T", "18446744073709551616", "9223372036854775808", "1KM", "1MK", "K", "", "-1", "1.5G", "0x10", "1 2K", "4iB", "banana"} {
		_, err := parseSize(in)
		require.Error(t, err, "%q", in)
	}

	def := defaultPinnedLimit()
	for _, in := range []string{"16777216T", "1KM", "lots"} {
		t.Run(in, func(t *testing.T) {
			t.Setenv(envvar.PinnedLimit, in)
			warn := captureWarnings(t)
			l := &limit{}
			l.init()
			require.Equal(t, def, l.max.Load(), "the default stays")
			require.Equal(t, 1, strings.Count(warn.String(), "\n"), "%q", warn.String())
			require.Contains(t, warn.String(), envvar.PinnedLimit)
			require.Contains(t, warn.String(), in)
		})
	}
}

// Issue 9, item 8: BlockSize works on blocks of the target memory spaces,
// which Owner and Free accept too.
func TestBlockSizeOfTargetBlocks(t *testing.T) {
	for _, ms := range []memspace.ID{memspace.TargetHost, memspace.TargetShared, memspace.TargetDevice} {
		a := mustNew(t, ms)
		p, err := a.Alloc(1000)
		require.NoError(t, err)
		n, err := blockSize(p)
		require.NoError(t, err, ms)
		require.Equal(t, uintptr(1000), n)
		o, err := ownerOf(p)
		require.NoError(t, err)
		require.Same(t, a, o)
		require.NoError(t, Free(p))
		_, err = blockSize(p)
		require.Error(t, err, "freed")
		require.NoError(t, a.Destroy())
	}
}

// Issue 23 item 5, with the figures: a 10.5 MiB block of a 12 MiB
// pool served from a kept 13 MiB region was charged 10.5 MiB (+16), and
// growing it in place to 12 MiB charged nothing: 13,631,488 bytes were live
// in the 12,582,912-byte pool. Since issue 29 item 12 a block is charged
// what it occupies (the region) on every path: in a 12 MiB pool the kept
// 13 MiB region cannot be charged, so the block gets a region of its own
// size; in a 16 MiB pool it takes the kept region, charged whole, and grows
// inside it without a further charge. PoolUsed equals FootprintLive
// throughout, and never passes pool_size.
func TestPoolChargesInPlaceGrowth(t *testing.T) {
	grow := map[string]func(a *Allocator, p unsafe.Pointer, n uintptr) (unsafe.Pointer, error){
		"Realloc": func(a *Allocator, p unsafe.Pointer, n uintptr) (unsafe.Pointer, error) {
			return realloc(p, n, nil)
		},
		"Resize": func(a *Allocator, p unsafe.Pointer, n uintptr) (unsafe.Pointer, error) {
			s, err := Resize(a, unsafe.Slice((*byte)(p), 1), int(n))
			return unsafe.Pointer(unsafe.SliceData(s)), err
		},
		"Bytes.Reallocate": func(a *Allocator, p unsafe.Pointer, n uintptr) (q unsafe.Pointer, err error) {
			defer func() {
				if r := recover(); r != nil {
					err = r.(error)
				}
			}()
			b := NewArrowAllocator(a).Reallocate(int(n), unsafe.Slice((*byte)(p), 1))
			return unsafe.Pointer(unsafe.SliceData(b)), nil
		},
	}
	balanced := func(t *testing.T, a *Allocator, pool int64) {
		t.Helper()
		st := a.Stats()
		require.Equal(t, st.FootprintLive, st.PoolUsed, "the charge is the footprint")
		require.LessOrEqual(t, st.PoolUsed, pool)
	}
	for name, g := range grow {
		for _, pool := range []int64{12 << 20, 16 << 20} {
			t.Run(fmt.Sprintf("%s/pool %d MiB", name, pool>>20), func(t *testing.T) {
				Trim()
				t.Cleanup(func() { Trim() })
				big := mustNew(t, memspace.Default)
				r, err := big.Alloc(13 << 20) // a 13 MiB region, freed and kept by the host heap
				require.NoError(t, err)
				require.NoError(t, Free(r))

				a := mustNew(t, memspace.Default, WithPoolSize(uintptr(pool)), WithFallback(traits.NullFb))
				p, err := a.Alloc(10<<20 + 512<<10)
				require.NoError(t, err)
				t.Cleanup(func() { _ = Free(p) })
				balanced(t, a, pool)
				info, err := Inspect(p)
				require.NoError(t, err)
				if pool == 12<<20 {
					require.Equal(t, uintptr(10<<20+512<<10), info.Room, "the kept 13 MiB region would pass the pool: a region of its own")
					q, err := a.Alloc(1 << 20)
					require.NoError(t, err)
					balanced(t, a, pool)
					fill(p, 16, 0x5a)
					np, err := g(a, p, 12<<20) // moves, and the move does not fit
					require.ErrorIs(t, err, ErrPoolExhausted)
					require.Nil(t, np)
					balanced(t, a, pool)
					sz, err := blockSize(p)
					require.NoError(t, err)
					require.Equal(t, uintptr(10<<20+512<<10), sz, "the block keeps its size")
					require.Equal(t, byte(0x5a), unsafe.Slice((*byte)(p), 16)[15])
					require.NoError(t, Free(q))
				} else {
					if info.Room != 13<<20 {
						t.Skipf("the 10.5 MiB block did not reuse the kept 13 MiB region (room %d): nothing to grow into", info.Room)
					}
					require.Equal(t, int64(13<<20+16), a.Stats().PoolUsed, "charged the whole region")
					fill(p, 16, 0x5a)
					np, err := g(a, p, 12<<20)
					require.NoError(t, err)
					require.Equal(t, p, np, "grown in place")
					balanced(t, a, pool)
					require.Equal(t, int64(13<<20+16), a.Stats().PoolUsed, "nothing more to charge")
					require.Equal(t, byte(0x5a), unsafe.Slice((*byte)(p), 16)[15])
				}
				require.NoError(t, Free(p))
				p = nil
				require.Zero(t, a.Stats().PoolUsed, "what was charged is given back")
			})
		}
	}
}
