//go:build linux && (amd64 || arm64)

package alloc

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/numa"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// vmFlags returns the VmFlags of the mapping holding p in /proc/self/smaps.
func vmFlags(t *testing.T, p uintptr) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(l, "%x-%x", &lo, &hi); n != 2 || p < lo || p >= hi {
			continue
		}
		for _, m := range lines[i+1:] {
			if f, ok := strings.CutPrefix(m, "VmFlags:"); ok {
				return strings.Fields(f)
			}
		}
	}
	t.Fatalf("%#x in no mapping", p)
	return nil
}

// TestPinnedChunksAskForHugePages: a pinned chunk is advised MADV_HUGEPAGE
// before it is locked.
func TestPinnedChunksAskForHugePages(t *testing.T) {
	needMempolicy(t)
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skip("transparent huge pages are off")
	}
	a, err := NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Pinned, Value: traits.True}, {Key: traits.Fallback, Value: traits.NullFb}})
	require.NoError(t, err)
	p, err := a.Alloc(64)
	if err != nil {
		t.Skipf("cannot pin here: %v", err)
	}
	flags := vmFlags(t, uintptr(p))
	require.Contains(t, flags, "hg", "advised huge")
	require.Contains(t, flags, "lo", "and locked")
	require.NoError(t, Free(p))
	require.NoError(t, a.Destroy())
}

// TestPlaceNearDevice: a chunk for a device on node N prefers N (the policy
// the kernel records); an unknown node or one the machine lacks leaves the
// default policy.
func TestPlaceNearDevice(t *testing.T) {
	needMempolicy(t)
	lc, err := dl.C()
	require.NoError(t, err)
	n0 := numa.System().IDs()[0]
	for _, c := range []struct {
		node int
		mode numa.Mode
	}{{n0, numa.ModePreferred}, {-1, numa.ModeDefault}, {n0 + 999, numa.ModeDefault}} {
		p, err := lc.MapAligned(4<<20, 4<<20)
		require.NoError(t, err)
		placeNearDevice(p, 4<<20, c.node)
		mode, nodes, err := numa.GetPolicy(p)
		require.NoError(t, err)
		require.Equal(t, c.mode, mode, "node %d", c.node)
		if c.mode == numa.ModePreferred {
			require.Equal(t, []int{n0}, nodes)
		}
		require.NoError(t, lc.Unmap(p, 4<<20))
	}
}
