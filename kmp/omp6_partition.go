package kmp

import (
	"github.com/ompalloc/ompalloc/internal/partition"
	"github.com/ompalloc/ompalloc/traits"
)

// OpenMP 6.0 memory partitioners. The numbers are the 6.0 omp.h ones; that
// header spells the names omp_atk_partioner, omp_atk_partioner_arg and
// omp_atv_partioner, LLVM has none of them yet.
const (
	AtkPartitioner    TraitKey = 15 // omp_atk_partitioner
	AtkPartitionerArg TraitKey = 16 // omp_atk_partitioner_arg
	AtvPartitioner    uintptr  = 23 // omp_atv_partitioner
)

var _ = [1]struct{}{}[AtkPartitionerArg-TraitKey(traits.PartitionerArg)]
var _ = [1]struct{}{}[AtvPartitioner-traits.PartitionerValue]

// MempartitionerLifetime is omp_mempartitioner_lifetime_t.
type MempartitionerLifetime = partition.Lifetime

// The lifetimes of a computed partition.
const (
	StaticMempartition    = partition.Static       // omp_static_mempartition
	AllocatorMempartition = partition.PerAllocator // omp_allocator_mempartition
	DynamicMempartition   = partition.Dynamic      // omp_dynamic_mempartition
)

// MempartitionerHandle is omp_mempartitioner_t: the value of an
// allocator's AtkPartitioner trait. 0 is none.
type MempartitionerHandle uintptr

// Mempartition is omp_mempartition_t, the object a compute routine fills:
// its methods Size, Memspace, NumResources and Arg say what to cut, Init
// and SetPart (or InitMempartition and MempartitionSetPart) fill it, and
// UserData (MempartitionGetUserData) is what Init stored.
type Mempartition = partition.MemPartition

// InitMempartitioner is omp_init_mempartitioner. compute is called with
// the partition to fill (InitMempartition, then MempartitionSetPart for
// every part; Size, NumResources and Arg say what to cut); release, which
// may be nil, when the partition's lifetime ends. A bad argument is a
// warning and 0.
func InitMempartitioner(lifetime MempartitionerLifetime, compute, release func(*Mempartition)) MempartitionerHandle {
	p, err := partition.New(lifetime, compute, release)
	if err != nil {
		warnf("omp_init_mempartitioner: %v", err)
		return 0
	}
	return MempartitionerHandle(p.Handle())
}

// DestroyMempartitioner is omp_destroy_mempartitioner. Destroying one that
// live allocators use is a warning and changes nothing.
func DestroyMempartitioner(h MempartitionerHandle) {
	p, ok := partition.Lookup(uintptr(h))
	if !ok {
		warnf("omp_destroy_mempartitioner: %#x is not a live partitioner", uintptr(h))
		return
	}
	if err := p.Destroy(); err != nil {
		warnf("omp_destroy_mempartitioner: %v", err)
	}
}

// InitMempartition is omp_init_mempartition: the partition has nparts
// parts and carries userData. 0 on success, -1 (and a warning) otherwise.
func InitMempartition(p *Mempartition, nparts int, userData uintptr) int {
	if p == nil {
		warnf("omp_init_mempartition: nil partition")
		return -1
	}
	if err := p.Init(nparts, userData); err != nil {
		warnf("omp_init_mempartition: %v", err)
		return -1
	}
	return 0
}

// DestroyMempartition is omp_destroy_mempartition: the runtime owns
// partitions and releases them at the end of their lifetime, through the
// release routine; calling it does nothing more than check p.
func DestroyMempartition(p *Mempartition) {
	if p == nil {
		warnf("omp_destroy_mempartition: nil partition")
	}
}

// MempartitionSetPart is omp_mempartition_set_part: part number part has
// size bytes on resource number resource (an index into the memory space's
// resources, see GetMemspaceNumResources). 0 on success, -1 and a warning
// otherwise.
func MempartitionSetPart(p *Mempartition, part, resource int, size uintptr) int {
	if p == nil {
		warnf("omp_mempartition_set_part: nil partition")
		return -1
	}
	if err := p.SetPart(part, resource, size); err != nil {
		warnf("omp_mempartition_set_part: %v", err)
		return -1
	}
	return 0
}

// MempartitionGetUserData is omp_mempartition_get_user_data.
func MempartitionGetUserData(p *Mempartition) uintptr {
	if p == nil {
		warnf("omp_mempartition_get_user_data: nil partition")
		return 0
	}
	return p.UserData()
}
