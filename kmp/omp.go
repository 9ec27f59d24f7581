package kmp

import (
	"github.com/ompalloc/ompalloc/traits"
)

// AllocatorHandle is omp_allocator_handle_t.
type AllocatorHandle uintptr

// MemspaceHandle is omp_memspace_handle_t.
type MemspaceHandle uintptr

// TraitKey is omp_alloctrait_key_t.
type TraitKey uintptr

// AllocTrait is omp_alloctrait_t.
type AllocTrait struct {
	Key   TraitKey
	Value uintptr
}

// Predefined allocators (LLVM omp.h numbering).
const (
	NullAllocator        AllocatorHandle = 0
	DefaultMemAlloc      AllocatorHandle = 1
	LargeCapMemAlloc     AllocatorHandle = 2
	ConstMemAlloc        AllocatorHandle = 3
	HighBwMemAlloc       AllocatorHandle = 4
	LowLatMemAlloc       AllocatorHandle = 5
	CgroupMemAlloc       AllocatorHandle = 6
	PteamMemAlloc        AllocatorHandle = 7
	ThreadMemAlloc       AllocatorHandle = 8
	TargetHostMemAlloc   AllocatorHandle = 100
	TargetSharedMemAlloc AllocatorHandle = 101
	TargetDeviceMemAlloc AllocatorHandle = 102
)

// Predefined memory spaces.
const (
	NullMemSpace         MemspaceHandle = 0
	DefaultMemSpace      MemspaceHandle = 99
	LargeCapMemSpace     MemspaceHandle = 1
	ConstMemSpace        MemspaceHandle = 2
	HighBwMemSpace       MemspaceHandle = 3
	LowLatMemSpace       MemspaceHandle = 4
	TargetHostMemSpace   MemspaceHandle = 100
	TargetSharedMemSpace MemspaceHandle = 101
	TargetDeviceMemSpace MemspaceHandle = 102
)

// Trait keys.
const (
	AtkSyncHint        TraitKey = 1
	AtkAlignment       TraitKey = 2
	AtkAccess          TraitKey = 3
	AtkPoolSize        TraitKey = 4
	AtkFallback        TraitKey = 5
	AtkFbData          TraitKey = 6
	AtkPinned          TraitKey = 7
	AtkPartition       TraitKey = 8
	AtkPinDevice       TraitKey = 9
	AtkPreferredDevice TraitKey = 10
	AtkDeviceAccess    TraitKey = 11
	AtkTargetAccess    TraitKey = 12
	AtkAtomicScope     TraitKey = 13
	AtkPartSize        TraitKey = 14
)

// Trait values.
const (
	AtvFalse        uintptr = 0
	AtvTrue         uintptr = 1
	AtvContended    uintptr = 3
	AtvUncontended  uintptr = 4
	AtvSerialized   uintptr = 5
	AtvPrivate      uintptr = 6
	AtvDevice       uintptr = 7
	AtvThread       uintptr = 8
	AtvPteam        uintptr = 9
	AtvCgroup       uintptr = 10
	AtvDefaultMemFb uintptr = 11
	AtvNullFb       uintptr = 12
	AtvAbortFb      uintptr = 13
	AtvAllocatorFb  uintptr = 14
	AtvEnvironment  uintptr = 15
	AtvNearest      uintptr = 16
	AtvBlocked      uintptr = 17
	AtvInterleaved  uintptr = 18
	AtvAll          uintptr = 19
	AtvSingle       uintptr = 20
	AtvMultiple     uintptr = 21
	AtvMemspace     uintptr = 22
	AtvDefault      uintptr = ^uintptr(0)
)

// The numbering above is omp.h's; package traits owns the same numbers.
var _ = [1]struct{}{}[AtkPartSize-TraitKey(traits.PartSize)]
var _ = [1]struct{}{}[AtvMemspace-traits.Memspace]
