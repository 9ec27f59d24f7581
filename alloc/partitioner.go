package alloc

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/partition"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// An allocator with partition=partitioner cuts each block into the parts
// its partitioner computes (OpenMP 6.0; the partitioners are
// internal/partition's, made through kmp.InitMempartitioner) and binds
// each part to its NUMA node.

// partitionerUse is an allocator's side of its partitioner: the partitions
// it uses, and the memory space's nodes its parts' resources index.
type partitionerUse struct {
	u     *partition.Use
	nodes []int
}

func newPartitionerUse(ms memspace.ID, set traits.Set) (*partitionerUse, error) {
	p, ok := partition.Lookup(set.Partitioner)
	if !ok {
		return nil, partition.NotLive(set.Partitioner)
	}
	nodes, _, _ := memspace.Placement(ms)
	if len(nodes) == 0 {
		return nil, fmt.Errorf("partition=partitioner on %v: %w: no NUMA nodes back it", ms, ErrNotSupported)
	}
	u, err := p.Use(ms, len(nodes), set.PartitionerArg)
	if err != nil {
		return nil, err
	}
	return &partitionerUse{u: u, nodes: nodes}, nil
}

// place binds the parts of the block at p (page-aligned) to their nodes,
// moving pages a reused block already has.
func (u *partitionerUse) place(p, size uintptr) error {
	mp, err := u.u.Partition(p, size)
	if err != nil {
		return err
	}
	var plan []numa.Part
	var off uintptr
	for _, pt := range mp.Parts() {
		// Parts are page-granular: each starts at the page holding its
		// first byte (the block starts on a page).
		start := off &^ (pageSize - 1)
		end := (off + pt.Size + pageSize - 1) &^ (pageSize - 1)
		if n := len(plan); n > 0 && plan[n-1].Off+plan[n-1].Len > start {
			start = plan[n-1].Off + plan[n-1].Len
		}
		if end > start {
			plan = append(plan, numa.Part{Off: start, Len: end - start, Mode: numa.ModeBind, Nodes: []int{u.nodes[pt.Resource]}})
		}
		off += pt.Size
	}
	if !numa.Supported() {
		return nil // one node: every part is already on it
	}
	if err := numa.ApplyMoving(p, plan); err != nil {
		u.freed(p)
		return err
	}
	return nil
}

// freed releases a dynamic partition when its block is freed.
func (u *partitionerUse) freed(p uintptr) { u.u.Freed(p) }

// destroyed releases what the allocator kept and lets the partitioner go.
func (u *partitionerUse) destroyed() { u.u.Destroyed() }

// usePartitioner makes a an allocator of partition=partitioner: unpinned
// host memory only, every block page-aligned (so its parts own their pages)
// from a heap that no other kind of allocator shares.
func (a *Allocator) usePartitioner(ms memspace.ID, set traits.Set) error {
	if a.heap == nil || set.Pinned {
		return fmt.Errorf("partition=partitioner on %v: %w: only unpinned host memory can be partitioned", ms, ErrNotSupported)
	}
	u, err := newPartitionerUse(ms, set)
	if err != nil {
		return err
	}
	a.ptn = u
	a.align = max(a.align, pageSize)
	a.heap = partitionerHeap()
	return nil
}

func partitionerHeap() *heap.Heap {
	placedMu.Lock()
	defer placedMu.Unlock()
	const k = "partitioner"
	h := placedHeaps[k]
	if h == nil {
		h = heap.New(&placeSource{spec: numa.Spec{}, name: "host(partitioner)"}, heap.Config{Name: "host(partitioner)", KeepChunks: 1, KeepHuge: 64 << 20})
		placedHeaps[k] = h
	}
	return h
}
