package alloc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
)

// recorded reports whether leak-check mode recorded the block at p.
func recorded(p unsafe.Pointer) bool {
	_, ok := leakStacks.Load(uintptr(p))
	return ok
}

// TestLeakCheckGatesTheHotPath: while leak-check mode is on, a block the
// heap's hot path would serve from the P's cache (heap.AllocEntry) is
// served by the general path, which records its stack, for an allocator
// made before the mode was turned on (SetLeakCheck gates it) and one made
// while it is on (install gates it); once the mode is off, the hot path
// serves again and records nothing.
func TestLeakCheckGatesTheHotPath(t *testing.T) {
	was := SetLeakCheck(false)
	t.Cleanup(func() { SetLeakCheck(was) })
	before := mustNew(t, memspace.Default)
	// Warm the P caches of the class, so that the hot path has blocks.
	warm := func(a *Allocator) {
		var ps []unsafe.Pointer
		for range 64 {
			p, err := a.Alloc(64)
			require.NoError(t, err)
			ps = append(ps, p)
		}
		for _, p := range ps {
			require.NoError(t, Free(p))
		}
	}
	warm(before)

	require.False(t, SetLeakCheck(true))
	during := mustNew(t, memspace.Default)
	warm(during)
	for _, a := range []*Allocator{before, during, Default()} {
		for range 8 {
			p, err := a.Alloc(64)
			require.NoError(t, err)
			require.True(t, recorded(p), "%v: a 64 B block allocated in leak-check mode has its stack", a)
			require.NoError(t, Free(p))
			require.False(t, recorded(p), "%v: freed, forgotten", a)
		}
	}

	require.True(t, SetLeakCheck(false))
	for _, a := range []*Allocator{before, during, Default()} {
		p, err := a.Alloc(64)
		require.NoError(t, err)
		require.False(t, recorded(p), "%v: leak-check mode off: nothing recorded", a)
		require.NoError(t, Free(p))
	}
}
