// Package partition holds the OpenMP 6.0 memory partitioners: the objects
// kmp's omp_init_mempartitioner makes (Partitioner), the partitions their
// compute routines fill (MemPartition), and an allocator's use of one
// (Use), which package alloc binds to NUMA nodes block by block. Package
// kmp is its door: kmp.Mempartition is MemPartition.
package partition

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Lifetime says how long a computed partition is kept
// (omp_mempartitioner_lifetime_t, OpenMP 6.0).
type Lifetime int

// The lifetimes, numbered as in the OpenMP 6.0 omp.h.
const (
	// Static: computed once per allocation size for every allocator using
	// the partitioner, released when it is destroyed.
	Static Lifetime = 1
	// PerAllocator: computed once per allocation size and allocator,
	// released when the allocator is destroyed.
	PerAllocator Lifetime = 2
	// Dynamic: computed for every allocation, released when the block is
	// freed.
	Dynamic Lifetime = 3
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

// Part is one part of a computed partition, in order.
type Part struct {
	Resource int     // an index into the memory space's NUMA nodes
	Size     uintptr // bytes
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
		return fmt.Errorf("a partition of %d parts: %w: it needs at least one", nparts, sentinel.ErrInvalidArgument)
	}
	p.parts, p.userData, p.inited = make([]mempart, nparts), userData, true
	return nil
}

// SetPart is omp_mempartition_set_part: part number part has size bytes
// on resource number resource.
func (p *MemPartition) SetPart(part, resource int, size uintptr) error {
	switch {
	case !p.inited:
		return fmt.Errorf("part %d: %w: omp_mempartition_set_part before omp_init_mempartition", part, sentinel.ErrInvalidArgument)
	case part < 0 || part >= len(p.parts):
		return fmt.Errorf("part %d: %w: out of range [0, %d)", part, sentinel.ErrInvalidArgument, len(p.parts))
	case resource < 0 || resource >= p.nres:
		return fmt.Errorf("part %d: %w: resource %d out of range [0, %d)", part, sentinel.ErrInvalidArgument, resource, p.nres)
	case size == 0:
		return fmt.Errorf("part %d: %w: size 0", part, sentinel.ErrInvalidArgument)
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
// (omp_mempartitioner_t). Make one with New and name it in an allocator's
// partitioner trait with partition=partitioner.
type Partitioner struct {
	handle   uintptr
	lifetime Lifetime
	compute  func(*MemPartition)
	release  func(*MemPartition)

	mu     sync.Mutex
	static map[uintptr]*MemPartition // by size, Static
	users  int
	dead   bool
}

var (
	partitionersMu sync.Mutex
	partitioners           = map[uintptr]*Partitioner{}
	nextPtn        uintptr = 1
)

// New is omp_init_mempartitioner. compute must fill the
// partition it is given (Init, then SetPart for every part); release, which
// may be nil, is called on each partition when its lifetime ends.
func New(lifetime Lifetime, compute, release func(*MemPartition)) (*Partitioner, error) {
	if lifetime < Static || lifetime > Dynamic {
		return nil, fmt.Errorf("partitioner lifetime %d: %w: want static (1), allocator (2) or dynamic (3)", lifetime, sentinel.ErrInvalidArgument)
	}
	if compute == nil {
		return nil, fmt.Errorf("partitioner: %w: no compute routine", sentinel.ErrInvalidArgument)
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

// Lookup returns the live partitioner with handle h.
func Lookup(h uintptr) (*Partitioner, bool) {
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
		return fmt.Errorf("partitioner %d: %w: already destroyed", p.handle, sentinel.ErrInvalidArgument)
	}
	if p.users > 0 {
		return fmt.Errorf("partitioner %d: %w: used by %d live allocators", p.handle, sentinel.ErrInvalidArgument, p.users)
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

// Parts returns the parts of a checked partition, in order.
func (p *MemPartition) Parts() []Part {
	out := make([]Part, len(p.parts))
	for i, pt := range p.parts {
		out[i] = Part{Resource: pt.resource, Size: pt.size}
	}
	return out
}

// Use is an allocator's side of its partitioner.
type Use struct {
	p    *Partitioner
	ms   memspace.ID
	nres int
	arg  uintptr

	mu      sync.Mutex
	byAlloc map[uintptr]*MemPartition // PerAllocator, by size
	byBlock map[uintptr]*MemPartition // Dynamic, by block address
}

// notLive is the error for a partitioner trait naming no live partitioner.
func notLive(h uintptr) error {
	return &traits.TraitError{Key: traits.Partitioner, Value: h, HasValue: true, Reason: "not a live partitioner"}
}

// Use starts an allocator's use of p on memory space ms, whose nres NUMA
// nodes are the resources; arg is its partitioner_arg trait. A destroyed
// partitioner is refused, as an unknown one is by Lookup's caller. The
// partitioner cannot be destroyed until Destroyed.
func (p *Partitioner) Use(ms memspace.ID, nres int, arg uintptr) (*Use, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil, notLive(p.handle)
	}
	p.users++
	return &Use{p: p, ms: ms, nres: nres, arg: arg,
		byAlloc: map[uintptr]*MemPartition{}, byBlock: map[uintptr]*MemPartition{}}, nil
}

// NotLive is the error for a partitioner trait naming no live partitioner:
// a trait error.
func NotLive(h uintptr) error { return notLive(h) }

func (u *Use) compute(size uintptr) (*MemPartition, error) {
	mp := &MemPartition{size: size, ms: u.ms, nres: u.nres, arg: u.arg}
	u.p.compute(mp)
	if err := mp.check(); err != nil {
		u.p.releasePart(mp)
		return nil, fmt.Errorf("partitioner %d: %w: %v", u.p.handle, numa.ErrPolicy, err)
	}
	return mp, nil
}

// Partition returns the partition for a block of size bytes at addr,
// computing it when its lifetime asks.
func (u *Use) Partition(addr, size uintptr) (*MemPartition, error) {
	switch u.p.lifetime {
	case Static:
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
	case PerAllocator:
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

// Freed releases a dynamic partition when its block is freed.
func (u *Use) Freed(p uintptr) {
	if u.p.lifetime != Dynamic {
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

// Destroyed releases what the allocator kept and lets the partitioner go.
func (u *Use) Destroyed() {
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
