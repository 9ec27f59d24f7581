package alloc

import (
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// A device's pinned pool keeps its free lists per NUMA node where that
// matters. A device whose node is known (a GPU: its PCI slot's node) has one
// heap, whose chunks prefer that node. The host device, and any device whose
// node is unknown, on a machine with more than one node with CPUs and
// memory, has one heap per such node: each chunk prefers its heap's node
// (mbind before locking), and an allocation is served by the heap of the
// caller's node. Only when that heap cannot get memory (the pinned-bytes
// limit, a failed lock) do the other nodes' heaps serve it, nearest first;
// PinnedPoolStats.FarAllocs counts those. A freed block goes back to the heap of
// its chunk (the heap's radix table says which), so near memory is never
// handed to a far caller while the near heap has any.
//
// On a one-node machine the pool is one heap and the allocator's fast path
// is unchanged: no node lookup at all.
type pinnedPool struct {
	dev   int
	bound []int          // nil, or the memory space's nodes every chunk is bound to (newBoundPinnedPool)
	heaps []*heap.Heap   // one, or one per node (ascending node)
	srcs  []*pinSource   // heaps[i]'s source
	nodes []int          // heaps[i]'s node; [-1] for a single heap (the device's node)
	near  []int          // caller's node → index of its heap (the nearest heap's node)
	order [][]int        // per heap: every heap index, that one first, then by distance
	far   []atomic.Int64 // per heap: allocations it served to callers of another node
}

// multi reports whether the pool has a heap per node (and its allocators
// pick one per allocation).
func (pp *pinnedPool) multi() bool { return len(pp.heaps) > 1 }

// Test hooks (set only by tests, before any pool they check exists): the
// topology the pools split by, the node of a device, and the node of the
// calling thread. Chunks are still placed with the machine's topology
// (placeNearDevice), so a fixture node the machine lacks is never bound.
var (
	poolTopology = numa.System
	deviceNode   = func(dev int) int {
		d, err := device.Get(dev)
		if err != nil {
			return -1
		}
		return d.Info().NUMANode
	}
	currentNode = func() int {
		n, err := numa.CurrentNode()
		if err != nil {
			return -1
		}
		return n
	}
)

func newPinnedPool(dev int) *pinnedPool {
	top := poolTopology()
	nodes := top.PoolNodes(deviceNode(dev))
	pp := &pinnedPool{dev: dev}
	if nodes == nil {
		name := fmt.Sprintf("pinned(device %d)", dev)
		pp.add(name, &pinSource{dev: dev, node: -1, name: "the pinned heap of device " + fmt.Sprint(dev), heap: name})
		pp.nodes, pp.near, pp.order = []int{-1}, nil, [][]int{{0}}
		pp.far = make([]atomic.Int64, 1)
		return pp
	}
	for _, n := range nodes {
		name := fmt.Sprintf("pinned(device %d, node %d)", dev, n)
		pp.add(name, &pinSource{dev: dev, node: n, name: fmt.Sprintf("the pinned heap of device %d on node %d", dev, n), heap: name})
	}
	pp.route(top, nodes)
	return pp
}

// newBoundPinnedPool makes the pinned pool of device dev for pinned
// allocators on a memory space of some NUMA nodes (high_bw on HBM nodes,
// large_cap on CXL nodes, a sub-memory space): every chunk is bound
// (MPOL_BIND) to those nodes before it is locked, so that locking faults
// its pages in there, on the node of them nearest the locking thread; a
// chunk the nodes cannot hold fails, and the allocator's fallback trait
// decides (issue 29 item 10: before, these allocators drew on the
// device's own pool, DDR on the caller's node, without a word). Where the
// space's nodes nearest to the CPU nodes differ (HBM on each socket), it
// keeps a heap per such node, routed as a device's pool per node is, so a
// thread reuses blocks of its own socket's memory.
func newBoundPinnedPool(dev int, bound []int) *pinnedPool {
	top := numa.System() // chunks are bound: the machine's nodes, never a fixture's
	pp := &pinnedPool{dev: dev, bound: slices.Clone(bound)}
	list := numa.FormatList(bound)
	var nodes []int
	for _, c := range top.PoolNodes(-1) {
		if m := top.Nearest(c, bound); !slices.Contains(nodes, m) {
			nodes = append(nodes, m)
		}
	}
	if len(nodes) < 2 {
		name := fmt.Sprintf("pinned(device %d, nodes %s)", dev, list)
		pp.add(name, &pinSource{dev: dev, node: -1, bind: pp.bound, heap: name,
			name: fmt.Sprintf("the pinned heap of device %d bound to nodes %s", dev, list)})
		pp.nodes, pp.near, pp.order = []int{-1}, nil, [][]int{{0}}
		pp.far = make([]atomic.Int64, 1)
		return pp
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		name := fmt.Sprintf("pinned(device %d, nodes %s, node %d)", dev, list, n)
		pp.add(name, &pinSource{dev: dev, node: n, bind: pp.bound, heap: name,
			name: fmt.Sprintf("the pinned heap of device %d bound to nodes %s, for node %d", dev, list, n)})
	}
	pp.route(top, nodes)
	return pp
}

// route sets the pool's routing for heaps on nodes (ascending, one heap
// each, in that order): every node of top goes to the heap on its nearest
// node of nodes, and each heap's fallbacks are the others, nearest first.
func (pp *pinnedPool) route(top *numa.Topology, nodes []int) {
	pp.nodes = nodes
	pp.far = make([]atomic.Int64, len(nodes))
	maxID := 0
	for _, n := range top.Nodes {
		maxID = max(maxID, n.ID)
	}
	index := func(node int) int {
		for i, n := range nodes {
			if n == node {
				return i
			}
		}
		return 0
	}
	pp.near = make([]int, maxID+1)
	for id := range pp.near {
		pp.near[id] = index(top.Nearest(id, nodes)) // unknown ids: Nearest gives the lowest node, heap 0
	}
	for i, n := range nodes {
		rest := make([]int, 0, len(nodes))
		rest = append(rest, i)
		left := append([]int(nil), nodes...)
		left = append(left[:i], left[i+1:]...)
		for len(left) > 0 {
			m := top.Nearest(n, left)
			rest = append(rest, index(m))
			for k, x := range left {
				if x == m {
					left = append(left[:k], left[k+1:]...)
					break
				}
			}
		}
		pp.order = append(pp.order, rest)
	}
}

func (pp *pinnedPool) add(name string, src *pinSource) {
	h := heap.New(src, heap.Config{Name: name, KeepChunks: pinnedKeepChunks, KeepHuge: pinnedKeepHuge})
	pinnedHeapSet.Store(h, true) // before any block of it exists to ask about
	pp.heaps = append(pp.heaps, h)
	pp.srcs = append(pp.srcs, src)
}

// alloc serves one allocation of a multi-node pool: the caller's node's
// heap, else the others nearest first (counted in far). A far heap is
// asked as it is: it serves from what it has cached, and locks a new chunk
// only if the limit and the device let it, which after the near heap failed
// takes a race with a free.
func (pp *pinnedPool) alloc(size, align uintptr, owner uint32, zero bool, t *heap.Tally) (p, foot uintptr, err error) {
	i := 0
	if n := callerNode(); uint(n) < uint(len(pp.near)) {
		i = pp.near[n]
	}
	order := pp.order[i]
	p, foot, err = pp.heaps[i].AllocCounted(size, align, owner, zero, t)
	if err == nil {
		return p, foot, nil
	}
	for _, j := range order[1:] {
		if q, f, ferr := pp.heaps[j].AllocCounted(size, align, owner, zero, t); ferr == nil {
			pp.far[j].Add(1)
			return q, f, nil
		}
	}
	return 0, 0, err
}

// has reports whether h is one of the pool's heaps.
func (pp *pinnedPool) has(h *heap.Heap) bool {
	for _, x := range pp.heaps {
		if x == h {
			return true
		}
	}
	return false
}

// The caller's node is read from the CPU (RDTSCP, a few ns) where it can
// be. Elsewhere (arm64, a CPU or hypervisor without RDTSCP) it is cached
// per P and refreshed with getcpu(2) every nodeRefresh allocations on that
// P: a syscall per pinned allocation would cost more than the allocation
// (~40 ns), and Go gives no cheap signal of a thread's migration. The
// bound there: after a goroutine moves to a thread on another node, or
// another thread takes the P, up to nodeRefresh-1 allocations on that P
// are served by the previous node's heap, and are not counted as far. The
// answer is a hint either way: a goroutine moves between threads, and a
// thread between CPUs, unless the thread is locked (runtime.LockOSThread)
// and its affinity set.
const nodeRefresh = 64

type nodeSlot struct {
	guard pcpu.Guard
	node  int32
	left  int32 // allocations before the next getcpu
	_     [56]byte
}

var (
	nodeSlots  atomic.Pointer[[]nodeSlot]
	nodeSlotMu sync.Mutex
)

func init() { resetCallerNodes() }

// resetCallerNodes forgets every P's cached node (tests, after changing
// currentNode; GOMAXPROCS growth).
func resetCallerNodes() {
	s := make([]nodeSlot, runtime.GOMAXPROCS(0))
	nodeSlots.Store(&s)
}

// fastNode reads the calling thread's node without a system call where the
// CPU can say (numa.FastNode: RDTSCP on linux/amd64). A test hook, as
// currentNode.
var fastNode = numa.FastNode

// callerNode returns the calling thread's node: read from the CPU where it
// can be (exact at that instant: a pool counts every block served by
// another node's heap), else from the P's cache.
func callerNode() int {
	if n, ok := fastNode(); ok {
		return n
	}
	pid := pcpu.Pin()
	if s := *nodeSlots.Load(); pid < len(s) {
		c := &s[pid]
		c.guard.Lock()
		if c.left > 0 {
			c.left--
			n := c.node
			c.guard.Unlock()
			pcpu.Unpin()
			return int(n)
		}
		c.guard.Unlock()
	}
	pcpu.Unpin()
	return refreshCallerNode()
}

// refreshCallerNode asks the kernel, and caches the answer for this P.
func refreshCallerNode() int {
	n := currentNode()
	pid := pcpu.Pin()
	if s := *nodeSlots.Load(); pid < len(s) {
		c := &s[pid]
		c.guard.Lock()
		c.node, c.left = int32(n), nodeRefresh-1
		c.guard.Unlock()
		pcpu.Unpin()
		return n
	}
	pcpu.Unpin()
	nodeSlotMu.Lock() // GOMAXPROCS grew
	if len(*nodeSlots.Load()) < runtime.GOMAXPROCS(0) {
		resetCallerNodes()
	}
	nodeSlotMu.Unlock()
	return n
}
