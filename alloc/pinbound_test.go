//go:build linux && (amd64 || arm64)

package alloc

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// TestPinnedBoundRefusedGoesThroughTheFallback (issue 29 item 10): a
// pinned chunk that cannot be bound to its memory space's nodes (here a
// node this machine lacks) is never locked elsewhere: the allocation
// fails with ErrPlacement and the errno, and the fallback trait decides.
func TestPinnedBoundRefusedGoesThroughTheFallback(t *testing.T) {
	needMempolicy(t)
	host := target.InitialDevice()
	ids := numa.System().IDs()
	bad := boundPinnedPoolFor(host, []int{ids[len(ids)-1] + 60})
	t.Cleanup(func() {
		pinnedMu.Lock()
		delete(pinnedPools, pinKey{dev: host, bound: numa.FormatList(bad.bound)})
		pinnedMu.Unlock()
	})
	require.Equal(t, []int{ids[len(ids)-1] + 60}, bad.bound)
	for _, fb := range []traits.Value{traits.NullFb, traits.DefaultMemFb} {
		a, err := New(memspace.Default, WithPinned(true), WithPinDevice(host), WithFallback(fb))
		require.NoError(t, err)
		a.heap, a.pool = bad.heaps[0], nil
		p, err := a.Alloc(64)
		if fb == traits.NullFb {
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrPlacement)
			require.ErrorIs(t, err, ErrPinFailed)
			require.ErrorIs(t, err, syscall.EINVAL)
			require.ErrorContains(t, err, "mbind")
		} else {
			require.NoError(t, err)
			require.NotNil(t, p)
			require.Equal(t, uint64(1), a.Stats().Fallbacks)
			require.NoError(t, Free(p))
		}
		require.NoError(t, a.Destroy())
	}
	var found bool
	for _, ps := range readPinnedPools() {
		if ps.Device == host && len(ps.Bound) == 1 && ps.Bound[0] == ids[len(ids)-1]+60 {
			found = true
			require.Positive(t, ps.Failures, "the refused chunks are counted")
		}
	}
	require.True(t, found, "ReadPinnedStats().Pools lists the bound pool with its nodes")
}

// TestPinnedOnRestrictedSpaceUsesABoundPool: where a memory space is
// restricted to some nodes, its pinned allocators draw on the device's pool
// bound to them, never the device's own pool; where it is not (no HBM:
// high_bw is default memory, as memspace.Describe says), on the device's
// own pool.
func TestPinnedOnRestrictedSpaceUsesABoundPool(t *testing.T) {
	needMempolicy(t)
	host := target.InitialDevice()
	for _, ms := range []memspace.ID{memspace.HighBw, memspace.LargeCap, memspace.Default} {
		a := mustNew(t, ms, WithPinned(true), WithPinDevice(host))
		nodes, restricted, _ := memspace.Placement(ms)
		pp := pinnedPoolOf(a.heap)
		require.NotNil(t, pp, "%v", ms)
		if restricted {
			require.Equal(t, nodes, pp.bound, "%v", ms)
			require.NotSame(t, pinnedPoolFor(host), pp)
		} else {
			require.Same(t, pinnedPoolFor(host), pp, "%v", ms)
			require.Nil(t, pp.bound)
		}
	}
}
