package alloc

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// ErrPlacement: the kernel refused the memory policy an allocator's
// partition trait or memory space asked for (mbind failed; the errno is
// wrapped too). The allocation went through the fallback.
var ErrPlacement = numa.ErrPolicy

// The partition trait reaches the kernel per chunk, never per block: an
// allocator whose placement differs from the process's policy (a partition
// other than environment, or a memory space restricted to some NUMA nodes:
// HBM, CXL, a sub-memory space) draws from a heap of its own placement,
// shared by every allocator that places alike. That heap's source binds each
// 4 MiB chunk and each huge region with mbind(2) right after mapping it,
// before any page is touched, so every block, small or huge, lies in memory
// with the asked policy, and a small alloc+free costs what it costs on the
// default heap.
var (
	placedMu    sync.Mutex
	placedHeaps = map[string]*heap.Heap{}
)

func partitionOf(v uintptr) numa.Partition {
	switch v {
	case traits.Nearest:
		return numa.Nearest
	case traits.Blocked:
		return numa.Blocked
	case traits.Interleaved:
		return numa.Interleaved
	}
	return numa.Environment
}

// placementOf returns where an allocator on ms with set places its memory;
// ok false means the process's policy (the shared host heap).
// Without memory policies (macOS: one node as far as we know) every
// placement is the process's.
func placementOf(ms memspace.ID, set traits.Set) (numa.Spec, bool) {
	if !numa.Supported() {
		return numa.Spec{}, false
	}
	nodes, restricted, _ := memspace.Placement(ms)
	p := partitionOf(set.Partition)
	if p == numa.Environment && !restricted {
		return numa.Spec{}, false
	}
	s := numa.Spec{Partition: p, PartSize: set.PartSize}
	switch {
	case restricted:
		s.Nodes = nodes
	case p == numa.Blocked || p == numa.Interleaved:
		s.Nodes = nodes // every node with memory
	}
	return s, true
}

// hostHeapFor returns the heap of an unpinned host allocator, and the pool
// of heaps per node it draws on when it has one (nodePool).
func hostHeapFor(ms memspace.ID, set traits.Set) (*heap.Heap, *pinnedPool) {
	s, ok := placementOf(ms, set)
	if !ok {
		return hostHeap(), nil
	}
	if pp := nodePool(s); pp != nil {
		return pp.heaps[0], pp
	}
	return placedHeap(s), nil
}

// A nearest allocator on a machine with two or more CPU nodes draws on a
// pool with a heap per memory node, as the host's pinned pool does: each
// CPU node's heap has its chunks preferred (MPOL_PREFERRED) to its own node,
// or to the nearest node of the memory space's when that is restricted
// (HBM, CXL, a sub-memory space), and an allocation is served by the heap
// of the caller's node. A single placed heap under MPOL_LOCAL would place
// a chunk's pages where they are first touched, and a block freed by a
// node-1 thread and reused by a node-0 thread would keep its node-1 pages:
// OpenMP promises memory nearest to the thread that allocates. Preferred,
// not bound: a full node gives other memory rather than failing.
//
// The default partition (environment) on a memory space of several nodes
// (high_bw on a two-socket machine with HBM per socket, a sub-memory space)
// draws on such a pool too (issue 29 item 9): with one heap bound to all of
// them, a socket-1 thread's freed blocks, and the pages it touched first,
// went to socket-0 threads, whose high_bw memory then lay on the other
// socket's HBM, slower for them than their own DDR. Each heap serves the
// CPU nodes nearest its memory node, and its chunks stay bound
// (MPOL_BIND) to all of the space's nodes: the kernel takes, for each page,
// the space's node nearest the CPU that faults it in (mbind(2)), which is
// the heap's own node for its threads, and another of the space's nodes
// when that one is full, never memory outside the space. memkind's
// high-bandwidth kind likewise takes the HBM node closest to the caller. A
// partition trait of nearest, blocked or interleaved decides otherwise.
var nearestPools = map[string]*pinnedPool{} // by numa.Spec.Key; placedMu

// nodePool returns the pool of heaps per node of placement s, or nil where
// one heap does it: neither nearest nor environment on several nodes, one
// CPU node, or one node of the memory space nearest to every CPU node.
func nodePool(s numa.Spec) *pinnedPool {
	switch {
	case s.Partition == numa.Nearest:
	case s.Partition == numa.Environment && len(s.Nodes) > 1:
	default:
		return nil
	}
	top := numa.System() // chunks are bound: the machine's nodes, never a fixture's
	cpus := top.PoolNodes(-1)
	if cpus == nil {
		return nil
	}
	var nodes []int
	for _, c := range cpus {
		m := c
		if s.Nodes != nil {
			m = top.Nearest(c, s.Nodes)
		}
		if !slices.Contains(nodes, m) {
			nodes = append(nodes, m)
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	slices.Sort(nodes)
	k := s.Key()
	placedMu.Lock()
	defer placedMu.Unlock()
	if pp := nearestPools[k]; pp != nil {
		return pp
	}
	pp := &pinnedPool{dev: -1}
	for _, n := range nodes {
		name := fmt.Sprintf("host(%s, node %d)", k, n)
		spec := numa.Spec{Partition: numa.Nearest, Nodes: []int{n}}
		if s.Partition == numa.Environment {
			spec = s // bound to the space; the faulting CPU's nearest node of it
		}
		src := &placeSource{spec: spec, name: name}
		pp.heaps = append(pp.heaps, heap.New(src, heap.Config{Name: name, KeepChunks: 1, KeepHuge: 64 << 20}))
	}
	pp.route(top, nodes)
	nearestPools[k] = pp
	return pp
}

func placedHeap(s numa.Spec) *heap.Heap {
	k := s.Key()
	placedMu.Lock()
	defer placedMu.Unlock()
	h := placedHeaps[k]
	if h == nil {
		name := "host(" + k + ")"
		h = heap.New(&placeSource{spec: s, name: name}, heap.Config{Name: name, KeepChunks: 1, KeepHuge: 64 << 20})
		placedHeaps[k] = h
	}
	return h
}

// placeSource maps like heap.MapSource and binds what it maps.
type placeSource struct {
	spec numa.Spec
	name string
}

var pageSize = uintptr(os.Getpagesize())

func (s *placeSource) Acquire(n, align uintptr) (uintptr, error) {
	p, err := heap.MapSource{}.Acquire(n, align)
	if err != nil {
		return 0, err
	}
	spec := s.spec
	if spec.Partition == numa.Nearest && len(spec.Nodes) > 1 {
		// Nearest among the memory space's nodes to the CPU mapping the
		// chunk: the one preferred for it.
		if cur, err := numa.CurrentNode(); err == nil {
			near := numa.System().Nearest(cur, spec.Nodes)
			spec.Nodes = append([]int{near}, spec.Nodes...)
		}
	}
	if err := numa.Apply(p, numa.Plan(n, pageSize, spec, numa.System().IDs())); err != nil {
		_ = heap.MapSource{}.Release(p, n)
		return 0, fmt.Errorf("%s: %w", s.name, err)
	}
	return p, nil
}

func (s *placeSource) Release(p, n uintptr) error { return heap.MapSource{}.Release(p, n) }

// Placement describes where the allocator's memory goes: the partition,
// the NUMA nodes and the kernel policy its chunks get (in numa_maps words).
// Target and pinned allocators report the partition only, and a pinned
// allocator on a memory space of some nodes the nodes its chunks are bound
// to.
func (a *Allocator) Placement() string {
	part := partitionOf(a.traits.Partition)
	if a.target == nil && a.traits.Pinned {
		if pp := pinnedPoolOf(a.heap); pp != nil && pp.bound != nil {
			return fmt.Sprintf("%v (not applied to this memory); pinned chunks bound to nodes %s before locking", part, numa.FormatList(pp.bound))
		}
	}
	if a.target != nil || a.traits.Pinned {
		return part.String() + " (not applied to this memory)"
	}
	s, ok := placementOf(a.ms, a.traits)
	if !ok {
		return "environment: the process's policy"
	}
	if a.pool != nil && a.target == nil {
		var far int64
		for i := range a.pool.far {
			far += a.pool.far[i].Load()
		}
		if part == numa.Environment {
			return fmt.Sprintf("%v on nodes %s: a heap per node %s, the caller's nearest node's first, bind to nodes %s per chunk (each page on the node of them nearest the CPU that touches it first; %d blocks served from another node's heap)",
				part, numa.FormatList(s.Nodes), numa.FormatList(a.pool.nodes), numa.FormatList(s.Nodes), far)
		}
		return fmt.Sprintf("%v: a heap per node %s, the caller's node's first, MPOL_PREFERRED per chunk (%d blocks served from another node's heap)",
			part, numa.FormatList(a.pool.nodes), far)
	}
	plan := numa.Plan(4<<20, pageSize, s, numa.System().IDs())
	if len(plan) == 0 {
		return part.String() + ": the process's policy"
	}
	return fmt.Sprintf("%v on nodes %s: %v per chunk", part, numa.FormatList(s.Nodes), plan[0].Mode)
}

// adviseHuge asks for transparent huge pages on a pinned chunk or region
// about to be locked: mlock and the drivers' registration then fault and
// walk 2 MiB pages, 512 times fewer (ROCm measured hipHostRegister of a
// large buffer 2.5x faster). Refusal (no THP) is not an error. Memory in
// hugetlb pages needs no advice.
func adviseHuge(p, n uintptr) {
	if n >= 2<<20 && hugePages() != HugePagesOff && !isHugeTLB(p) {
		_ = numa.AdviseHuge(p, n)
	}
}

// placeNearDevice prefers the node of the device a pinned chunk is locked
// for (its PCI numa_node), before locking faults the pages in: same-node
// pinned copies run ~3x faster than cross-node ones on GH200-class hosts.
// Preferred, not bound: a full node must not fail the pin. Unknown (-1,
// the host device, a plugin that does not say) leaves the process's policy,
// under which the locking thread's node gets the pages.
func placeNearDevice(p, n uintptr, node int) {
	if node < 0 || !numa.Supported() {
		return
	}
	if _, ok := numa.System().Node(node); !ok {
		return
	}
	_ = numa.Apply(p, []numa.Part{{Len: n, Mode: numa.ModePreferred, Nodes: []int{node}}})
}
