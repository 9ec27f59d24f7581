package alloc

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
	"github.com/stretchr/testify/require"
)

// fixture reads the sysfs fixture tree name; it skips t where the tree is
// absent: a test binary run away from its source tree (the GPU bundle of
// scripts/gpu-check.sh) would read one node from a missing root.
func fixture(t *testing.T, name string) *numa.Topology {
	t.Helper()
	root := filepath.Join("..", "internal", "numa", "testdata", name)
	if _, err := os.Stat(root); err != nil {
		t.Skipf("fixture tree %s absent (the test binary runs outside its source tree): %v", name, err)
	}
	return numa.Read(root)
}

// dropPinnedPool forgets device dev's pinned pool, giving back what it holds
// idle, so that the next pinned allocator makes a new one with the hooks as
// they are then. No allocator may draw on it.
func dropPinnedPool(t *testing.T, dev int) {
	t.Helper()
	pinnedMu.Lock()
	pp := pinnedPools[pinKey{dev: dev}]
	delete(pinnedPools, pinKey{dev: dev})
	pinnedMu.Unlock()
	if pp == nil {
		return
	}
	for _, h := range pp.heaps {
		h.Trim()
	}
	for _, s := range pp.srcs {
		s.retry()
	}
	for i, h := range pp.heaps {
		require.Zero(t, h.Stats().Mapped, "heap %d of device %d's old pool still holds memory", i, dev)
	}
}

// withPoolHooks makes the host device's pinned pool anew under topology top,
// with the host device's node devNode, and the calling thread's node
// *node; everything is restored (and the fixture pool dropped) at cleanup.
func withPoolHooks(t *testing.T, top *numa.Topology, devNode int, node *int) int {
	t.Helper()
	dev := target.DefaultDevice()
	oldTop, oldDev, oldCur, oldFast := poolTopology, deviceNode, currentNode, fastNode
	dropPinnedPool(t, dev)
	poolTopology = func() *numa.Topology { return top }
	deviceNode = func(int) int { return devNode }
	currentNode = func() int { return *node }
	fastNode = func() (int, bool) { return -1, false }
	resetCallerNodes()
	t.Cleanup(func() {
		dropPinnedPool(t, dev)
		poolTopology, deviceNode, currentNode, fastNode = oldTop, oldDev, oldCur, oldFast
		resetCallerNodes()
	})
	return dev
}

// stayOnOneNode makes every caller of this test one node's: the first
// node of the default device's pinned pool (its only heap's on one node).
// A test of what one thread's pinned blocks share (a chunk, VmLck) needs
// them in one heap; on a machine with a heap per node the scheduler may
// move a goroutine to another node's CPU between two allocations. Undone at
// cleanup.
func stayOnOneNode(t *testing.T) {
	t.Helper()
	pp := pinnedPoolFor(target.DefaultDevice())
	node := pp.nodes[0]
	if node < 0 {
		return // one heap: nothing to choose
	}
	old, oldFast := currentNode, fastNode
	currentNode = func() int { return node }
	fastNode = func() (int, bool) { return node, true }
	resetCallerNodes()
	t.Cleanup(func() {
		currentNode, fastNode = old, oldFast
		resetCallerNodes()
	})
}

// armFault arms a fault point and disarms it at cleanup too, so a test
// that stops early never leaves it switched on for the tests after it.
func armFault(t *testing.T, point string, nth int, err error) (disarm func()) {
	t.Helper()
	disarm = fault.Arm(point, nth, err)
	t.Cleanup(disarm)
	return disarm
}

// heldBlocks frees, at cleanup, the blocks a test still holds: a test that
// stops early must not leave pinned memory locked for the tests after it.
type heldBlocks map[unsafe.Pointer]bool

func holdBlocks(t *testing.T) heldBlocks {
	h := heldBlocks{}
	t.Cleanup(func() {
		for p := range h {
			_ = Free(p)
		}
	})
	return h
}

// free frees p now, and forgets it.
func (h heldBlocks) free(t *testing.T, p unsafe.Pointer) {
	t.Helper()
	delete(h, p)
	require.NoError(t, Free(p))
}

func poolOf(t *testing.T, dev int) *pinnedPool {
	t.Helper()
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	pp := pinnedPools[pinKey{dev: dev}]
	require.NotNil(t, pp, "device %d has a pinned pool", dev)
	return pp
}

// heapIndex says which of pp's heaps the live block at p lies in.
func heapIndex(t *testing.T, pp *pinnedPool, p uintptr) int {
	t.Helper()
	b, _, err := heap.Room(p)
	require.NoError(t, err)
	for i, h := range pp.heaps {
		if h == b.Heap {
			return i
		}
	}
	t.Fatalf("block %#x is in none of the pool's heaps", p)
	return -1
}

// setNode moves the (pretend) calling thread to node n, and makes every P
// ask again.
func setNode(node *int, n int) {
	*node = n
	resetCallerNodes()
}

func TestPinnedPoolNodeHeaps(t *testing.T) {
	const size = 1000
	tests := []struct {
		name      string
		freeOn    int // the node the block is allocated and freed on
		allocOn   int // the node of the next allocation
		wantHeap  int // the heap that must serve it
		wantReuse bool
	}{
		{"node 0 is not handed node 1's cached block", 1, 0, 0, false},
		{"node 1 gets node 1's cached block back", 1, 1, 1, true},
		{"node 1 is not handed node 0's cached block", 0, 1, 1, false},
		{"node 0 gets node 0's cached block back", 0, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := 0
			dev := withPoolHooks(t, fixture(t, "two-socket"), -1, &node)
			a := mustNew(t, memspace.Default, WithPinned(true))
			pp := poolOf(t, dev)
			require.Equal(t, []int{0, 1}, pp.nodes)

			setNode(&node, tc.freeOn)
			p, err := a.Alloc(size)
			require.NoError(t, err)
			require.Equal(t, tc.freeOn, heapIndex(t, pp, uintptr(p)), "a block of node %d's caller is in node %d's heap", tc.freeOn, tc.freeOn)
			require.NoError(t, Free(p))
			before := pp.heaps[tc.wantHeap].Stats().Chunks

			setNode(&node, tc.allocOn)
			q, err := a.Alloc(size)
			require.NoError(t, err)
			defer func() { require.NoError(t, Free(q)) }()
			require.Equal(t, tc.wantHeap, heapIndex(t, pp, uintptr(q)))
			if tc.wantReuse {
				require.Equal(t, before, pp.heaps[tc.wantHeap].Stats().Chunks, "the cached chunk served it: no new lock")
			}
			st, ok := readPinnedPool(dev)
			require.True(t, ok)
			require.Zero(t, st.FarAllocs)
			require.Len(t, st.Nodes, 2)
			require.Equal(t, 0, st.Nodes[0].Node)
			require.Equal(t, 1, st.Nodes[1].Node)
		})
	}
}

func TestPinnedPoolFarFallback(t *testing.T) {
	node := 0
	dev := withPoolHooks(t, fixture(t, "two-socket"), -1, &node)
	a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	pp := poolOf(t, dev)

	// Node 1's heap gets a chunk and keeps it empty; node 0's has none.
	setNode(&node, 1)
	p, err := a.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, Free(p))
	require.Zero(t, pp.heaps[0].Stats().Chunks)
	require.Equal(t, 1, pp.heaps[1].Stats().Chunks)

	_, used := pinnedLimit()
	old := SetPinnedLimit(used) // not one byte more may be locked
	t.Cleanup(func() { SetPinnedLimit(old) })

	setNode(&node, 0)
	q, err := a.Alloc(1000)
	require.NoError(t, err, "node 1's heap serves a node-0 caller when node 0's can get no memory")
	require.Equal(t, 1, heapIndex(t, pp, uintptr(q)))
	st, _ := readPinnedPool(dev)
	require.Equal(t, int64(0), st.Nodes[0].FarAllocs)
	require.Equal(t, int64(1), st.Nodes[1].FarAllocs)
	require.Equal(t, int64(1), st.FarAllocs)

	// A huge block needs a region of its own: no heap can get one.
	_, err = a.Alloc(8 << 20)
	require.ErrorIs(t, err, ErrPinFailed)
	require.ErrorContains(t, err, "pinned-memory limit")
	require.ErrorContains(t, err, fmt.Sprintf("pinned(device %d, node 0)", dev), "the near heap's error, by name")
	require.NotContains(t, err.Error(), "node 1")
	st, _ = readPinnedPool(dev)
	require.Equal(t, int64(1), st.FarAllocs, "a failed far try is not counted")
	require.NoError(t, Free(q))
}

func TestPinnedPoolKnownDeviceNode(t *testing.T) {
	node := 1
	dev := withPoolHooks(t, fixture(t, "two-socket"), 0, &node)
	require.Nil(t, poolTopology().PoolNodes(deviceNode(dev)), "one heap: the device's node is known")
	a := mustNew(t, memspace.Default, WithPinned(true))
	p, err := a.Alloc(1000)
	require.NoError(t, err)
	defer func() { require.NoError(t, Free(p)) }()
	require.Nil(t, a.pool, "a one-heap pool keeps the allocator's plain path")
	st, ok := readPinnedPool(dev)
	require.True(t, ok)
	require.Len(t, st.Nodes, 1)
	require.Equal(t, -1, st.Nodes[0].Node, "the single heap is the device's node")
	require.Equal(t, st.Locked, st.Nodes[0].Locked)
	require.Zero(t, st.FarAllocs)
}

func TestPoolNodesFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		devNode int
		want    []int
	}{
		{"single", -1, nil},
		{"none", -1, nil},
		{"odd", -1, nil},
		{"two-socket", -1, []int{0, 1}},
		{"two-socket", 0, nil},
		{"two-socket", 1, nil},
		{"two-socket", 7, []int{0, 1}}, // a node the machine lacks is unknown
		{"xeon-max-flat", -1, []int{0, 1}},
		{"xeon-max-flat", 2, nil},
		{"cxl", -1, nil},
		{"gh200", -1, nil},
		{"cxl-tiers-only", -1, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/dev-node-%d", tc.fixture, tc.devNode), func(t *testing.T) {
			require.Equal(t, tc.want, fixture(t, tc.fixture).PoolNodes(tc.devNode))
		})
	}
}

// writeTopology writes a sysfs node tree: node i has CPU i, 1 GiB, and the
// distances dist[i].
func writeTopology(t *testing.T, dist [][]int) *numa.Topology {
	t.Helper()
	root := t.TempDir()
	for i, row := range dist {
		dir := filepath.Join(root, "sys", "devices", "system", "node", fmt.Sprintf("node%d", i))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		d := ""
		for k, v := range row {
			if k > 0 {
				d += " "
			}
			d += fmt.Sprint(v)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cpulist"), []byte(fmt.Sprintf("%d\n", i)), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "distance"), []byte(d+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "meminfo"), []byte(fmt.Sprintf("Node %d MemTotal:       1048576 kB\n", i)), 0o644))
	}
	return numa.Read(root)
}

func TestPinnedPoolOrder(t *testing.T) {
	tests := []struct {
		name string
		top  *numa.Topology
		want [][]int
	}{
		{"two-socket", fixture(t, "two-socket"), [][]int{{0, 1}, {1, 0}}},
		{"xeon-max-flat", fixture(t, "xeon-max-flat"), [][]int{{0, 1}, {1, 0}}},
		{"ring of four", writeTopology(t, [][]int{
			{10, 12, 30, 20},
			{12, 10, 20, 30},
			{30, 20, 10, 12},
			{20, 30, 12, 10},
		}), [][]int{{0, 1, 3, 2}, {1, 0, 2, 3}, {2, 3, 1, 0}, {3, 2, 0, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := 0
			dev := withPoolHooks(t, tc.top, -1, &node)
			pp := pinnedPoolFor(dev)
			require.Equal(t, tc.want, pp.order)
			// A caller's node maps to its own heap.
			for i, n := range pp.nodes {
				require.Equal(t, i, pp.near[n])
			}
		})
	}
}
