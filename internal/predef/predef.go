// Package predef is the table of omp.h's predefined allocators: their
// handles, names and memory spaces. Packages traits (OMP_ALLOCATOR,
// fb_data), alloc (which makes them) and kmp read it.
package predef

import (
	"fmt"

	"github.com/ompalloc/ompalloc/memspace"
)

// The predefined allocators' handles, as LLVM's omp.h numbers them: the one
// place the module writes them down but package kmp, whose public
// constants (kmp.DefaultMemAlloc ...) spell the numbers out for go doc and
// are checked against these by kmp's tests.
const (
	Null            = 0 // omp_null_allocator
	DefaultMem      = 1
	LargeCapMem     = 2
	ConstMem        = 3
	HighBwMem       = 4
	LowLatMem       = 5
	CgroupMem       = 6
	PteamMem        = 7
	ThreadMem       = 8
	TargetHostMem   = 100
	TargetSharedMem = 101
	TargetDeviceMem = 102
)

// predefinedAllocators lists the predefined allocators of LLVM's omp.h, with
// the memory space each one draws from.
var predefinedAllocators = []struct {
	h    uintptr
	name string
	ms   memspace.ID
}{
	{DefaultMem, "omp_default_mem_alloc", memspace.Default},
	{LargeCapMem, "omp_large_cap_mem_alloc", memspace.LargeCap},
	{ConstMem, "omp_const_mem_alloc", memspace.Const},
	{HighBwMem, "omp_high_bw_mem_alloc", memspace.HighBw},
	{LowLatMem, "omp_low_lat_mem_alloc", memspace.LowLat},
	{CgroupMem, "omp_cgroup_mem_alloc", memspace.Default},
	{PteamMem, "omp_pteam_mem_alloc", memspace.Default},
	{ThreadMem, "omp_thread_mem_alloc", memspace.Default},
	{TargetHostMem, "llvm_omp_target_host_mem_alloc", memspace.TargetHost},
	{TargetSharedMem, "llvm_omp_target_shared_mem_alloc", memspace.TargetShared},
	{TargetDeviceMem, "llvm_omp_target_device_mem_alloc", memspace.TargetDevice},
}

// ByName returns the omp.h handle of a predefined allocator
// (omp_default_mem_alloc = 1 ... llvm_omp_target_device_mem_alloc = 102). The
// match is exact; omp_null_allocator is not an allocator and is not found.
func ByName(name string) (uintptr, bool) {
	for _, p := range predefinedAllocators {
		if p.name == name {
			return p.h, true
		}
	}
	return 0, false
}

// Name returns the omp.h name of a predefined allocator,
// "omp_null_allocator" for 0, and "allocator#N" (N in decimal) for any other handle, the name package alloc
// gives the allocators it makes.
func Name(h uintptr) string {
	if h == Null {
		return "omp_null_allocator"
	}
	for _, p := range predefinedAllocators {
		if p.h == h {
			return p.name
		}
	}
	return fmt.Sprintf("allocator#%d", h)
}

// Handles returns the handles of the predefined allocators in
// omp.h order. The slice is new on each call.
func Handles() []uintptr {
	hs := make([]uintptr, len(predefinedAllocators))
	for i, p := range predefinedAllocators {
		hs[i] = p.h
	}
	return hs
}

// Memspace returns the memory space a predefined allocator draws
// from; cgroup, pteam and thread use omp_default_mem_space.
func Memspace(h uintptr) (memspace.ID, bool) {
	for _, p := range predefinedAllocators {
		if p.h == h {
			return p.ms, true
		}
	}
	return memspace.Null, false
}

// ForMemspace returns the predefined allocator that serves a predefined
// memory space with default traits (omp_default_mem_space →
// omp_default_mem_alloc), as libgomp maps a bare memory space in
// OMP_ALLOCATOR.
func ForMemspace(ms memspace.ID) (uintptr, bool) {
	for _, p := range predefinedAllocators {
		// cgroup/pteam/thread share the default memspace but carry an access
		// trait; the first entry for a memspace is the plain one.
		if p.ms == ms {
			return p.h, true
		}
	}
	return 0, false
}
