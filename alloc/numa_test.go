//go:build linux && (amd64 || arm64)

package alloc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// needMempolicy skips when the kernel does not implement the memory-policy
// calls: ENOSYS from a kernel built without CONFIG_NUMA, and from qemu-user,
// which runs the arm64 suite in CI. What the tests check is then not there.
func needMempolicy(t *testing.T) {
	t.Helper()
	if !numa.Supported() {
		t.Skip("no memory-policy calls here (CONFIG_NUMA off, or qemu-user): get_mempolicy is ENOSYS")
	}
}

// numaMapsPolicy returns the policy word of the mapping holding p in
// /proc/self/numa_maps (mappings are listed by start; p's is the last start
// at or below p).
func numaMapsPolicy(t *testing.T, p uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/numa_maps")
	if err != nil {
		t.Skipf("no /proc/self/numa_maps: %v", err)
	}
	var best uintptr
	var pol string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		var start uintptr
		if _, err := fmt.Sscanf(f[0], "%x", &start); err == nil && start <= p && start >= best {
			best, pol = start, f[1]
		}
	}
	return pol
}

// TestPartitionReachesTheKernel: blocks of every size from an allocator with
// a partition trait lie in mappings whose kernel policy is the one asked
// (before the trait was applied, every one read "default").
func TestPartitionReachesTheKernel(t *testing.T) {
	needMempolicy(t)
	all := numa.System().IDs()
	n0 := numa.FormatList(all[:1])
	single := len(all) == 1
	cases := []struct {
		name  string
		ts    []traits.Trait
		mode  numa.Mode
		words string
	}{
		{"environment", nil, numa.ModeDefault, "default"},
		{"nearest", []traits.Trait{{Key: traits.Partition, Value: traits.Nearest}}, numa.ModeLocal, "local"},
		{"blocked", []traits.Trait{{Key: traits.Partition, Value: traits.Blocked}}, numa.ModeBind, "bind:" + n0},
		{"interleaved", []traits.Trait{{Key: traits.Partition, Value: traits.Interleaved}}, numa.ModeInterleave, "interleave:" + numa.FormatList(all)},
		{"interleaved part_size", []traits.Trait{{Key: traits.Partition, Value: traits.Interleaved}, {Key: traits.PartSize, Value: 1 << 20}}, numa.ModeBind, "bind:" + n0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if single && c.name == "interleaved" {
				c.mode, c.words = numa.ModeBind, "bind:"+n0 // one node: the plan binds to it
			}
			split := c.name == "nearest" && numa.System().PoolNodes(-1) != nil
			if split {
				// Two or more CPU nodes: a heap per node, each chunk
				// preferred to its heap's node (nearestPool).
				c.mode, c.words = numa.ModePreferred, "prefer:"
			}
			a, err := NewFromTraits(memspace.Default, c.ts)
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Destroy()) }()
			for _, size := range []uintptr{64, 100 << 10, 8 << 20} {
				p, err := a.Alloc(size)
				require.NoError(t, err)
				mode, _, err := numa.GetPolicy(uintptr(p))
				require.NoError(t, err)
				require.Equal(t, c.mode, mode, "%d-byte block", size)
				if split {
					require.True(t, strings.HasPrefix(numaMapsPolicy(t, uintptr(p)), c.words), "%d-byte block", size)
				} else {
					require.Equal(t, c.words, numaMapsPolicy(t, uintptr(p)), "%d-byte block", size)
				}
				// Touch it: the page lands on an allowed node.
				unsafe.Slice((*byte)(p), size)[size-1] = 1
				nodes, err := numa.PageNodes([]uintptr{uintptr(p) + size - 1})
				require.NoError(t, err)
				require.Contains(t, all, nodes[0])
				require.NoError(t, Free(p))
			}
			require.Contains(t, a.Placement(), c.name[:min(len(c.name), 8)])
		})
	}
}

// TestPlacementRefusedGoesThroughTheFallback: a policy the kernel refuses
// (a node this machine lacks) fails the chunk; the fallback trait decides,
// and the error names mbind and the errno.
func TestPlacementRefusedGoesThroughTheFallback(t *testing.T) {
	needMempolicy(t)
	bad := placedHeap(numa.Spec{Partition: numa.Blocked, Nodes: []int{numa.System().IDs()[len(numa.System().IDs())-1] + 60}})
	for _, fb := range []traits.Value{traits.NullFb, traits.DefaultMemFb} {
		a, err := NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Partition, Value: traits.Blocked}, {Key: traits.Fallback, Value: fb}})
		require.NoError(t, err)
		a.heap = bad
		a.head.Fast.Init(a.heap, a.shards.t, a.id, a.align) // the hot path's heap too
		p, err := a.Alloc(64)
		if fb == traits.NullFb {
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrPlacement)
			require.ErrorIs(t, err, syscall.EINVAL)
			require.ErrorIs(t, err, ErrOutOfMemory)
			require.ErrorContains(t, err, "mbind")
		} else {
			require.NoError(t, err)
			require.NotNil(t, p)
			require.Equal(t, uint64(1), a.Stats().Fallbacks)
			mode, _, err := numa.GetPolicy(uintptr(p))
			require.NoError(t, err)
			require.Equal(t, numa.ModeDefault, mode, "served by omp_default_mem_alloc")
			require.NoError(t, Free(p))
		}
		require.NoError(t, a.Destroy())
	}
}

// TestPlacedHeapsAreShared: allocators that place alike share one heap;
// the default placement is the shared host heap.
func TestPlacedHeapsAreShared(t *testing.T) {
	needMempolicy(t)
	mk := func(ts ...traits.Trait) *Allocator {
		a, err := NewFromTraits(memspace.Default, ts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Destroy() })
		return a
	}
	b1 := mk(traits.Trait{Key: traits.Partition, Value: traits.Blocked})
	b2 := mk(traits.Trait{Key: traits.Partition, Value: traits.Blocked}, traits.Trait{Key: traits.Alignment, Value: 64})
	il := mk(traits.Trait{Key: traits.Partition, Value: traits.Interleaved})
	env := mk(traits.Trait{Key: traits.Partition, Value: traits.Environment})
	require.Same(t, b1.heap, b2.heap)
	require.NotSame(t, b1.heap, il.heap)
	require.Same(t, hostHeap(), env.heap)
	d, _ := lookup(predef.DefaultMem)
	require.Same(t, hostHeap(), d.heap)
	require.True(t, b1.plain, "a placed heap keeps the fast path")
}
