// Package predef is the table of omp.h's predefined allocators: their
// handles, names and memory spaces. Packages traits (OMP_ALLOCATOR,
// fb_data), alloc (which makes them) and kmp read it.
package predef

import (
	"fmt"

	"github.com/ompalloc/ompalloc/memspace"
)

// predefinedAllocators lists the predefined allocators of LLVM's omp.h, with
// the memory space each one draws from.
var predefinedAllocators = []struct {
	h    uintptr
	name string
	ms   memspace.ID
}{
	{1, "omp_default_mem_alloc", memspace.Default},
	{2, "omp_large_cap_mem_alloc", memspace.LargeCap},
	{3, "omp_const_mem_alloc", memspace.Const},
	{4, "omp_high_bw_mem_alloc", memspace.HighBw},
	{5, "omp_low_lat_mem_alloc", memspace.LowLat},
	{6, "omp_cgroup_mem_alloc", memspace.Default},
	{7, "omp_pteam_mem_alloc", memspace.Default},
	{8, "omp_thread_mem_alloc", memspace.Default},
	{100, "llvm_omp_target_host_mem_alloc", memspace.TargetHost},
	{101, "llvm_omp_target_shared_mem_alloc", memspace.TargetShared},
	{102, "llvm_omp_target_device_mem_alloc", memspace.TargetDevice},
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
	if h == 0 {
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
