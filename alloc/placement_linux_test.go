//go:build linux && (amd64 || arm64)

package alloc

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// These tests ask the kernel where the pages of blocks really landed
// (move_pages). They need a machine, or a guest (scripts/numa-vm.sh), with
// the nodes they name, and skip with the reason elsewhere.

// needNodes skips unless the machine has at least n nodes with memory.
func needNodes(t *testing.T, n int) []int {
	t.Helper()
	needMempolicy(t)
	nodes := numa.System().Tiers().Default
	if len(nodes) < n {
		t.Skipf("needs %d NUMA nodes with memory; this machine has %d (%v)", n, len(nodes), nodes)
	}
	return nodes
}

// needCPUNodes skips unless the machine has at least two nodes with both
// CPUs and memory, and returns them.
func needCPUNodes(t *testing.T) []int {
	t.Helper()
	needMempolicy(t)
	nodes := numa.System().PoolNodes(-1)
	if nodes == nil {
		t.Skip("needs two NUMA nodes with CPUs and memory; this machine has fewer")
	}
	return nodes
}

// onNode runs f on an OS thread allowed only the CPUs of node. The thread
// ends with f (its goroutine exits locked), so its affinity goes with it.
// f must not call t's FailNow (it runs on another goroutine): it returns
// what the test checks.
func onNode[T any](t *testing.T, node int, f func() (T, error)) T {
	t.Helper()
	n, ok := numa.System().Node(node)
	require.True(t, ok)
	var set [16]uint64 // 1024 CPUs
	for _, c := range n.CPUs {
		require.Less(t, c, 1024)
		set[c/64] |= 1 << (c % 64)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits
		_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(set), uintptr(unsafe.Pointer(&set)))
		if e != 0 {
			done <- result{err: fmt.Errorf("sched_setaffinity to node %d's CPUs: %w", node, e)}
			return
		}
		if _, ok := fastNode(); !ok {
			// The per-P node cache (no RDTSCP here) may still hold the
			// node of the thread that ran on this P before: ask again.
			resetCallerNodes()
		}
		v, err := f()
		done <- result{v, err}
	}()
	r := <-done
	require.NoError(t, r.err)
	return r.v
}

// pagesOf touches every page of the n bytes at p and returns the node of
// each.
func pagesOf(t *testing.T, p unsafe.Pointer, n uintptr) []int {
	t.Helper()
	got, err := pageNodes(p, n)
	require.NoError(t, err)
	return got
}

func pageNodes(p unsafe.Pointer, n uintptr) ([]int, error) {
	b := unsafe.Slice((*byte)(p), n)
	var addrs []uintptr
	first, end := uintptr(p)&^(pageSize-1), uintptr(p)+n
	for page := first; page < end; page += pageSize {
		b[max(page, uintptr(p))-uintptr(p)] = 1
		addrs = append(addrs, page)
	}
	return numa.PageNodes(addrs)
}

// allocOn allocates size bytes from a on a thread of node, touches them,
// frees them, and returns the nodes their pages were on.
func allocOn(t *testing.T, a *Allocator, node int, size uintptr) []int {
	t.Helper()
	return onNode(t, node, func() ([]int, error) {
		p, err := a.Alloc(size)
		if err != nil {
			return nil, err
		}
		got, err := pageNodes(p, size)
		return distinct(got), errors.Join(err, Free(p))
	})
}

func distinct(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNearestFollowsTheCaller: a nearest allocator gives a thread memory
// on its own node, also when the block is one another node's thread freed
// (before, the node-0 thread got the freed block back with its node-1
// pages), and on a sub-memory space each CPU node gets its nearest node.
func TestNearestFollowsTheCaller(t *testing.T) {
	cpus := needCPUNodes(t)
	top := numa.System()
	spaces := []struct {
		name  string
		ms    memspace.ID
		nodes []int // nil: every node (the caller's own)
	}{{"default", memspace.Default, nil}}
	var memOnly []int
	for _, n := range top.Nodes {
		if n.MemoryOnly() {
			memOnly = append(memOnly, n.ID)
		}
	}
	if len(memOnly) > 0 {
		sub, err := memspace.OnNodes(memspace.Default, memOnly)
		require.NoError(t, err)
		spaces = append(spaces, struct {
			name  string
			ms    memspace.ID
			nodes []int
		}{"memory-only nodes " + numa.FormatList(memOnly), sub, memOnly})
	}
	for _, sp := range spaces {
		t.Run(sp.name, func(t *testing.T) {
			a := mustNew(t, sp.ms, WithTrait(traits.Partition, traits.Nearest))
			want := func(c int) int {
				if sp.nodes == nil {
					return c
				}
				return top.Nearest(c, sp.nodes)
			}
			for _, size := range []uintptr{64, 100 << 10, 3 << 20} {
				// Allocated and freed on the last CPU node, then asked for on
				// each CPU node in turn.
				last := cpus[len(cpus)-1]
				require.Equal(t, []int{want(last)}, allocOn(t, a, last, size), "%d bytes on node %d", size, last)
				for _, c := range cpus {
					require.Equal(t, []int{want(c)}, allocOn(t, a, c, size), "%d bytes for a thread on node %d", size, c)
				}
			}
			require.Contains(t, a.Placement(), "a heap per node")
		})
	}
}

// multiNodeSpaces returns the host memory spaces of several nodes whose
// nearest node differs between CPU nodes (high_bw with HBM per socket, a
// sub-memory space of memory-only nodes), with their nodes; it skips when
// this machine has none.
func multiNodeSpaces(t *testing.T, cpus []int) map[string]struct {
	ms    memspace.ID
	nodes []int
} {
	t.Helper()
	top := numa.System()
	out := map[string]struct {
		ms    memspace.ID
		nodes []int
	}{}
	add := func(name string, ms memspace.ID, nodes []int) {
		near := map[int]bool{}
		for _, c := range cpus {
			near[top.Nearest(c, nodes)] = true
		}
		if len(nodes) > 1 && len(near) > 1 {
			out[name] = struct {
				ms    memspace.ID
				nodes []int
			}{ms, nodes}
		}
	}
	for _, ms := range []memspace.ID{memspace.HighBw, memspace.LargeCap} {
		if nodes, restricted, _ := memspace.Placement(ms); restricted {
			add(ms.String(), ms, nodes)
		}
	}
	var memOnly []int
	for _, n := range top.Nodes {
		if n.MemoryOnly() {
			memOnly = append(memOnly, n.ID)
		}
	}
	if len(memOnly) > 1 {
		sub, err := memspace.OnNodes(memspace.Default, memOnly)
		require.NoError(t, err)
		add("memory-only nodes "+numa.FormatList(memOnly), sub, memOnly)
	}
	if len(out) == 0 {
		t.Skip("needs a memory space of several nodes nearest to different CPU nodes (HBM per socket: NUMA_VM_TOPOLOGY=hbm-cxl); this machine has none")
	}
	return out
}

// TestMultiNodeSpaceServesTheNearestNode (issue 29 item 9): with the
// default partition, an allocator on a memory space of several nodes
// (high_bw with HBM on each socket) gives each CPU node's threads memory on
// the space's node nearest to them, also blocks another socket's thread
// freed (before, one heap bound to all of them: after a socket-1 thread
// used it, socket 0's 64 B, 64 KiB and 1 MiB blocks and a reused 16 MiB
// block lay on socket 1's HBM).
func TestMultiNodeSpaceServesTheNearestNode(t *testing.T) {
	cpus := needCPUNodes(t)
	top := numa.System()
	for name, sp := range multiNodeSpaces(t, cpus) {
		t.Run(name, func(t *testing.T) {
			a := mustNew(t, sp.ms)
			for _, size := range []uintptr{64, 64 << 10, 1 << 20, 16 << 20} {
				last := cpus[len(cpus)-1]
				require.Equal(t, []int{top.Nearest(last, sp.nodes)}, allocOn(t, a, last, size), "%d bytes on node %d", size, last)
				for _, c := range cpus {
					require.Equal(t, []int{top.Nearest(c, sp.nodes)}, allocOn(t, a, c, size), "%d bytes for a thread on node %d", size, c)
				}
			}
			require.Contains(t, a.Placement(), "a heap per node")
			// A partition trait decides otherwise: blocked spreads one
			// block over every node of the space.
			b := mustNew(t, sp.ms, WithTrait(traits.Partition, traits.Blocked))
			big := uintptr(len(sp.nodes)) * 4 << 20
			require.Equal(t, sp.nodes, allocOn(t, b, cpus[0], big), "blocked over %v", sp.nodes)
		})
	}
}

// TestPinnedMemorySpaceLandsOnItsNodes (issue 29 item 10): a pinned
// allocator on a memory space restricted to some nodes (high_bw on HBM,
// large_cap on CXL memory, a sub-memory space) locks memory on those
// nodes, for each CPU node the nearest of them; before, every pinned
// allocator drew on the device's pool, DDR on the caller's node.
func TestPinnedMemorySpaceLandsOnItsNodes(t *testing.T) {
	needMempolicy(t)
	top := numa.System()
	var cpus []int
	for _, n := range top.Nodes {
		if len(n.CPUs) > 0 && n.MemTotal > 0 {
			cpus = append(cpus, n.ID)
		}
	}
	type space struct {
		name  string
		ms    memspace.ID
		nodes []int
	}
	var spaces []space
	for _, ms := range []memspace.ID{memspace.HighBw, memspace.LargeCap} {
		if nodes, restricted, _ := memspace.Placement(ms); restricted {
			spaces = append(spaces, space{ms.String(), ms, nodes})
		}
	}
	var memOnly []int
	for _, n := range top.Nodes {
		if n.MemoryOnly() {
			memOnly = append(memOnly, n.ID)
		}
	}
	if len(memOnly) > 0 {
		sub, err := memspace.OnNodes(memspace.Default, memOnly)
		require.NoError(t, err)
		spaces = append(spaces, space{"memory-only nodes " + numa.FormatList(memOnly), sub, memOnly})
	}
	if len(spaces) == 0 || len(cpus) == 0 {
		t.Skip("needs memory-only NUMA nodes (HBM, CXL: scripts/numa-vm.sh); this machine has none")
	}
	for _, sp := range spaces {
		t.Run(sp.name, func(t *testing.T) {
			a := mustNew(t, sp.ms, WithPinned(true), WithPinDevice(target.InitialDevice()))
			for _, size := range []uintptr{64, 1 << 20, 8 << 20} {
				for _, c := range append([]int{cpus[len(cpus)-1]}, cpus...) {
					require.Equal(t, []int{top.Nearest(c, sp.nodes)}, allocOn(t, a, c, size),
						"a %d-byte pinned block of %s for a thread on node %d", size, sp.name, c)
				}
			}
			require.Contains(t, a.Placement(), "bound to nodes "+numa.FormatList(sp.nodes))
		})
	}
}

// TestPlacementLandsOnTheNodes: interleaved spreads a block's pages over
// every node, blocked gives each node one contiguous run in node order,
// high_bw and large_cap blocks lie on the nodes the topology names.
func TestPlacementLandsOnTheNodes(t *testing.T) {
	all := needNodes(t, 2)
	// Interleave moves in 2 MiB units under THP: two per node at least.
	big := max(uintptr(16<<20), uintptr(len(all))*4<<20)
	t.Run("interleaved", func(t *testing.T) {
		a := mustNew(t, memspace.Default, WithTrait(traits.Partition, traits.Interleaved))
		p, err := a.Alloc(big)
		require.NoError(t, err)
		t.Cleanup(func() { _ = Free(p) })
		require.Equal(t, all, distinct(pagesOf(t, p, big)), "every node holds part of a %d-byte block", big)
	})
	t.Run("blocked", func(t *testing.T) {
		a := mustNew(t, memspace.Default, WithTrait(traits.Partition, traits.Blocked))
		p, err := a.Alloc(big)
		require.NoError(t, err)
		t.Cleanup(func() { _ = Free(p) })
		got := pagesOf(t, p, big)
		runs := slices.Compact(slices.Clone(got))
		require.Equal(t, all, runs, "one run per node, in node order")
	})
	tr := numa.System().Tiers()
	for _, c := range []struct {
		ms    memspace.ID
		nodes []int
	}{{memspace.HighBw, tr.HighBw}, {memspace.LargeCap, tr.LargeCap}} {
		t.Run(c.ms.String(), func(t *testing.T) {
			if _, restricted, why := memspace.Placement(c.ms); !restricted {
				t.Skipf("no such memory here: %s", why)
			}
			a := mustNew(t, c.ms)
			for _, size := range []uintptr{64, 1 << 20, big} {
				p, err := a.Alloc(size)
				require.NoError(t, err)
				for _, n := range distinct(pagesOf(t, p, size)) {
					require.Contains(t, c.nodes, n, "%d-byte block of %v", size, c.ms)
				}
				require.NoError(t, Free(p))
			}
		})
	}
}

// TestPinnedPoolServesTheRealNode: every pinned block of a thread on node
// n0 comes from n0's heap, also right after another node's thread used the
// same Ps (before, the per-P cache sent the first ~20 of them to that
// node's heap, uncounted in FarAllocs). Where the node cannot be read
// without a system call (no RDTSCP: arm64) the cache and its documented
// bound remain, and the test skips.
func TestPinnedPoolServesTheRealNode(t *testing.T) {
	cpus := needCPUNodes(t)
	if _, ok := numa.FastNode(); !ok {
		t.Skip("the caller's node is cached per P here (no RDTSCP): up to 63 allocations after a move go to the previous node's heap")
	}
	pp := pinnedPoolFor(target.DefaultDevice())
	if !pp.multi() {
		t.Skip("the default device's pinned pool has one heap (a device of known node)")
	}
	a := mustNew(t, memspace.Default, WithPinned(true))
	n0, n1 := cpus[0], cpus[1]
	heapOf := func(p unsafe.Pointer) int {
		b, _, err := heap.Room(uintptr(p))
		if err != nil {
			return -1
		}
		for i, h := range pp.heaps {
			if h == b.Heap {
				return pp.nodes[i]
			}
		}
		return -1
	}
	run := func(node int) []int { // no cache reset: the pool reads the node itself
		done := make(chan []int, 1)
		go func() {
			var set [16]uint64
			n, _ := numa.System().Node(node)
			for _, c := range n.CPUs {
				set[c/64] |= 1 << (c % 64)
			}
			runtime.LockOSThread()
			if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(set), uintptr(unsafe.Pointer(&set))); e != 0 {
				done <- nil
				return
			}
			var ps []unsafe.Pointer
			var nodes []int
			for range 40 {
				p, err := a.Alloc(1000)
				if err != nil {
					break
				}
				ps = append(ps, p)
				nodes = append(nodes, heapOf(p))
			}
			for _, p := range ps {
				_ = Free(p)
			}
			done <- nodes
		}()
		return <-done
	}
	far := poolFar(pp)
	require.Len(t, run(n1), 40)
	got := run(n0)
	require.Len(t, got, 40)
	for i, n := range got {
		require.Equal(t, n0, n, "block %d of a thread on node %d", i, n0)
	}
	require.Equal(t, far, poolFar(pp), "no block came from another node's heap")
}

// poolFar sums a pool's far allocations.
func poolFar(pp *pinnedPool) int64 {
	var n int64
	for i := range pp.far {
		n += pp.far[i].Load()
	}
	return n
}
