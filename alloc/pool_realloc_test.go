package alloc

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 29, item 12: a seeded sequence of 400 Realloc calls moving one block
// between a 64 MiB pool allocator, a 48 MiB pool allocator with alignment
// 256, the default and a pinned allocator (sizes 1 B to 5 MiB) ended with
// the 48 MiB allocator holding one live 2 MiB block at FootprintLive
// 2,162,704 but PoolUsed 2,097,168: a block shrunk in place inside a huge
// region (or served from a reused, larger region) was charged what it
// needed, not what it occupies. pool_size counts footprint: after every
// step, each pool allocator's PoolUsed equals its FootprintLive, and both
// are zero once the block is gone.
func TestPoolChargeFollowsFootprintThroughRealloc(t *testing.T) {
	Trim()
	t.Cleanup(func() { Trim() })
	pool64 := mustNew(t, memspace.Default, WithPoolSize(64<<20), WithFallback(traits.NullFb))
	pool48 := mustNew(t, memspace.Default, WithPoolSize(48<<20), WithAlignment(256), WithFallback(traits.NullFb))
	pin := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.DefaultMemFb))
	as := []*Allocator{pool64, pool48, Default(), pin}
	pools := []*Allocator{pool64, pool48}
	check := func(step int, what string) {
		t.Helper()
		for _, a := range pools {
			st := a.Stats()
			require.Equal(t, st.FootprintLive, st.PoolUsed, "step %d (%s): %v charged %d for a live footprint of %d", step, what, a, st.PoolUsed, st.FootprintLive)
			require.LessOrEqual(t, st.PoolUsed, int64(a.traits.PoolSize))
		}
	}
	for _, seed := range []uint64{1, 29, 2026} {
		rng := rand.New(rand.NewPCG(seed, 12))
		var p unsafe.Pointer
		t.Cleanup(func() { _ = Free(p) })
		for step := range 400 {
			a := as[rng.IntN(len(as))]
			var size uintptr
			switch rng.IntN(4) { // every size range: small, medium, at 2 MiB, huge
			case 0:
				size = 1 + uintptr(rng.IntN(32<<10))
			case 1:
				size = 1 + uintptr(rng.IntN(2<<20))
			case 2:
				size = 2<<20 - 128<<10 + uintptr(rng.IntN(256<<10))
			default:
				size = 1 + uintptr(rng.IntN(5<<20))
			}
			np, err := realloc(p, size, a)
			require.NoError(t, err, "seed %d step %d: realloc(%p, %d, %v)", seed, step, p, size, a)
			p = np
			check(step, "after Realloc")
		}
		require.NoError(t, Free(p))
		p = nil
		for _, a := range pools {
			require.Zero(t, a.Stats().PoolUsed, "seed %d: %v", seed, a)
			require.Zero(t, a.Stats().FootprintLive, "seed %d: %v", seed, a)
		}
	}
}
