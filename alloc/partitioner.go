package alloc

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// PartitionerLifetime says how long a computed partition is kept
// (omp_mempartitioner_lifetime_t, OpenMP 6.0).
type PartitionerLifetime int

// The lifetimes, numbered as in the OpenMP 6.0 omp.h.
const (
	// PartitionStatic: computed once per allocation size for every
	// allocator using the partitioner, released when it is destroyed.
	PartitionStatic PartitionerLifetime = 1
	// PartitionAllocator: computed once per allocation size and allocator,
	// released when the allocator is destroyed.
	PartitionAllocator PartitionerLifetime = 2
	// PartitionDynamic: computed for every allocation, released when the
	// block is freed.
	PartitionDynamic PartitionerLifetime = 3
)

// MemPartition is one computed partition (omp_mempartition_t): the parts an
// allocation is cut into and the resource (an index into the memory
// space's NUMA nodes) each part lies on. The compute routine fills it.
type MemPartition struct {
	size     uintptr
	ms       memspace.ID
	nres     int
	arg      uintptr
	userData uintptr
	parts    []mempart
	inited   bool
}

type mempart struct {
	resource int
	size     uintptr
	set      bool
}

// Size is the size in bytes of the allocation being partitioned.
func (p *MemPartition) Size() uintptr { return p.size }

// Memspace is the memory space of the allocator.
func (p *MemPartition) Memspace() memspace.ID { return p.ms }

// NumResources is the number of resources (NUMA nodes) a part may name.
func (p *MemPartition) NumResources() int { return p.nres }

// Arg is the allocator's partitioner_arg trait.
func (p *MemPartition) Arg() uintptr { return p.arg }

// Init is omp_init_mempartition: the partition has nparts parts (set each
// with SetPart) and carries userData for the release routine.
func (p *MemPartition) Init(nparts int, userData uintptr) error {
	if nparts < 1 {
		return fmt.Errorf("a partition of %d parts: %w: it needs at least one", nparts, ErrInvalidArgument)
	}
	p.parts, p.userData, p.inited = make([]mempart, nparts), userData, true
	return nil
}

// SetPart is omp_mempartition_set_part: part number part has size bytes
// on resource number resource.
func (p *MemPartition) SetPart(part, resource int, size uintptr) error {
	switch {
	case !p.inited:
		return fmt.Errorf("part %d: %w: omp_mempartition_set_part before omp_init_mempartition", part, ErrInvalidArgument)
	case part < 0 || part >= len(p.parts):
		return fmt.Errorf("part %d: %w: out of range [0, %d)", part, ErrInvalidArgument, len(p.parts))
	case resource < 0 || resource >= p.nres:
		return fmt.Errorf("part %d: %w: resource %d out of range [0, %d)", part, ErrInvalidArgument, resource, p.nres)
	case size == 0:
		return fmt.Errorf("part %d: %w: size 0", part, ErrInvalidArgument)
	}
	p.parts[part] = mempart{resource: resource, size: size, set: true}
	return nil
}

// UserData is omp_mempartition_get_user_data.
func (p *MemPartition) UserData() uintptr { return p.userData }

// check says whether the compute routine left a usable partition.
func (p *MemPartition) check() error {
	if !p.inited {
		return errors.New("the compute routine did not call omp_init_mempartition")
	}
	var sum uintptr
	for i, pt := range p.parts {
		if !pt.set {
			return fmt.Errorf("part %d was not set", i)
		}
		sum += pt.size
	}
	if sum != p.size {
		return fmt.Errorf("the parts add up to %d bytes, the allocation has %d", sum, p.size)
	}
	return nil
}

// Partitioner computes how allocations are cut into parts
// (omp_mempartitioner_t). Make one with NewPartitioner and name it in an
// allocator's partitioner trait with partition=partitioner.
type Partitioner struct {
	handle   uintptr
	lifetime PartitionerLifetime
	compute  func(*MemPartition)
	release  func(*MemPartition)

	mu     sync.Mutex
	static map[uintptr]*MemPartition // by size, PartitionStatic
	users  int
	dead   bool
}

var (
	partitionersMu sync.Mutex
	partitioners           = map[uintptr]*Partitioner{}
	nextPtn        uintptr = 1
)

// NewPartitioner is omp_init_mempartitioner. compute must fill the
// partition it is given (Init, then SetPart for every part); release, which
// may be nil, is called on each partition when its lifetime ends.
func NewPartitioner(lifetime PartitionerLifetime, compute, release func(*MemPartition)) (*Partitioner, error) {
	if lifetime < PartitionStatic || lifetime > PartitionDynamic {
		return nil, fmt.Errorf("partitioner lifetime %d: %w: want static (1), allocator (2) or dynamic (3)", lifetime, ErrInvalidArgument)
	}
	if compute == nil {
		return nil, fmt.Errorf("partitioner: %w: no compute routine", ErrInvalidArgument)
	}
	partitionersMu.Lock()
	defer partitionersMu.Unlock()
	p := &Partitioner{handle: nextPtn, lifetime: lifetime, compute: compute, release: release, static: map[uintptr]*MemPartition{}}
	nextPtn++
	partitioners[p.handle] = p
	return p, nil
}

// Handle is the partitioner's value for the partitioner trait.
func (p *Partitioner) Handle() uintptr { return p.handle }

// LookupPartitioner returns the live partitioner with handle h.
func LookupPartitioner(h uintptr) (*Partitioner, bool) {
	partitionersMu.Lock()
	defer partitionersMu.Unlock()
	p, ok := partitioners[h]
	return p, ok
}

// Destroy is omp_destroy_mempartitioner. It is refused while a live
// allocator uses the partitioner; static partitions are released.
func (p *Partitioner) Destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return fmt.Errorf("partitioner %d: %w: already destroyed", p.handle, ErrInvalidArgument)
	}
	if p.users > 0 {
		return fmt.Errorf("partitioner %d: %w: used by %d live allocators", p.handle, ErrInvalidArgument, p.users)
	}
	p.dead = true
	for _, mp := range p.static {
		p.releasePart(mp)
	}
	p.static = nil
	partitionersMu.Lock()
	delete(partitioners, p.handle)
	partitionersMu.Unlock()
	return nil
}

func (p *Partitioner) releasePart(mp *MemPartition) {
	if p.release != nil {
		p.release(mp)
	}
}

// partitionerUse is an allocator's side of its partitioner.
type partitionerUse struct {
	p     *Partitioner
	ms    memspace.ID
	nodes []int
	arg   uintptr

	mu      sync.Mutex
	byAlloc map[uintptr]*MemPartition // PartitionAllocator, by size
	byBlock map[uintptr]*MemPartition // PartitionDynamic, by block address
}

func newPartitionerUse(ms memspace.ID, set traits.Set) (*partitionerUse, error) {
	p, ok := LookupPartitioner(set.Partitioner)
	if !ok {
		return nil, &traits.TraitError{Key: traits.Partitioner, Value: set.Partitioner, HasValue: true, Reason: "not a live partitioner"}
	}
	nodes, _, _ := memspace.Placement(ms)
	if len(nodes) == 0 {
		return nil, fmt.Errorf("partition=partitioner on %v: %w: no NUMA nodes back it", ms, ErrNotSupported)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil, &traits.TraitError{Key: traits.Partitioner, Value: set.Partitioner, HasValue: true, Reason: "not a live partitioner"}
	}
	p.users++
	return &partitionerUse{p: p, ms: ms, nodes: nodes, arg: set.PartitionerArg,
		byAlloc: map[uintptr]*MemPartition{}, byBlock: map[uintptr]*MemPartition{}}, nil
}

func (u *partitionerUse) compute(size uintptr) (*MemPartition, error) {
	mp := &MemPartition{size: size, ms: u.ms, nres: len(u.nodes), arg: u.arg}
	u.p.compute(mp)
	if err := mp.check(); err != nil {
		u.p.releasePart(mp)
		return nil, fmt.Errorf("partitioner %d: %w: %v", u.p.handle, ErrPlacement, err)
	}
	return mp, nil
}

// partition returns the partition for a block of size bytes at addr,
// computing it when its lifetime asks.
func (u *partitionerUse) partition(addr, size uintptr) (*MemPartition, error) {
	switch u.p.lifetime {
	case PartitionStatic:
		u.p.mu.Lock()
		defer u.p.mu.Unlock()
		if mp := u.p.static[size]; mp != nil {
			return mp, nil
		}
		mp, err := u.compute(size)
		if err == nil {
			u.p.static[size] = mp
		}
		return mp, err
	case PartitionAllocator:
		u.mu.Lock()
		defer u.mu.Unlock()
		if mp := u.byAlloc[size]; mp != nil {
			return mp, nil
		}
		mp, err := u.compute(size)
		if err == nil {
			u.byAlloc[size] = mp
		}
		return mp, err
	}
	mp, err := u.compute(size)
	if err == nil {
		u.mu.Lock()
		u.byBlock[addr] = mp
		u.mu.Unlock()
	}
	return mp, err
}

// place binds the parts of the block at p (page-aligned) to their nodes,
// moving pages a reused block already has.
func (u *partitionerUse) place(p, size uintptr) error {
	mp, err := u.partition(p, size)
	if err != nil {
		return err
	}
	var plan []numa.Part
	var off uintptr
	for _, pt := range mp.parts {
		// Parts are page-granular: each starts at the page holding its
		// first byte (the block starts on a page).
		start := off &^ (pageSize - 1)
		end := (off + pt.size + pageSize - 1) &^ (pageSize - 1)
		if n := len(plan); n > 0 && plan[n-1].Off+plan[n-1].Len > start {
			start = plan[n-1].Off + plan[n-1].Len
		}
		if end > start {
			plan = append(plan, numa.Part{Off: start, Len: end - start, Mode: numa.ModeBind, Nodes: []int{u.nodes[pt.resource]}})
		}
		off += pt.size
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
func (u *partitionerUse) freed(p uintptr) {
	if u.p.lifetime != PartitionDynamic {
		return
	}
	u.mu.Lock()
	mp := u.byBlock[p]
	delete(u.byBlock, p)
	u.mu.Unlock()
	if mp != nil {
		u.p.releasePart(mp)
	}
}

// destroyed releases what the allocator kept and lets the partitioner go.
func (u *partitionerUse) destroyed() {
	u.mu.Lock()
	parts := u.byAlloc
	u.byAlloc = map[uintptr]*MemPartition{}
	u.mu.Unlock()
	for _, mp := range parts {
		u.p.releasePart(mp)
	}
	u.p.mu.Lock()
	u.p.users--
	u.p.mu.Unlock()
}

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
