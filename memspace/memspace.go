package memspace

import "fmt"

// ID is a memory space handle, omp_memspace_handle_t.
type ID uintptr

// The predefined memory spaces, numbered as in LLVM's omp.h.
const (
	Null         ID = 0   // omp_null_mem_space
	LargeCap     ID = 1   // omp_large_cap_mem_space
	Const        ID = 2   // omp_const_mem_space
	HighBw       ID = 3   // omp_high_bw_mem_space
	LowLat       ID = 4   // omp_low_lat_mem_space
	Default      ID = 99  // omp_default_mem_space
	TargetHost   ID = 100 // llvm_omp_target_host_mem_space
	TargetShared ID = 101 // llvm_omp_target_shared_mem_space
	TargetDevice ID = 102 // llvm_omp_target_device_mem_space
)

// firstRuntime (0x1000) is the first handle a runtime-made memory space may take
// (OpenMP 6.0 device memory spaces). Handles below it are reserved for omp.h.
const firstRuntime ID = 0x1000

// predefined lists the memory spaces in the order All returns them.
var predefined = []struct {
	id   ID
	name string
}{
	{Default, "omp_default_mem_space"},
	{LargeCap, "omp_large_cap_mem_space"},
	{Const, "omp_const_mem_space"},
	{HighBw, "omp_high_bw_mem_space"},
	{LowLat, "omp_low_lat_mem_space"},
	{TargetHost, "llvm_omp_target_host_mem_space"},
	{TargetShared, "llvm_omp_target_shared_mem_space"},
	{TargetDevice, "llvm_omp_target_device_mem_space"},
}

const nullName = "omp_null_mem_space"

// String returns the omp.h name of a predefined memory space, and a
// descriptive form for any other handle.
func (id ID) String() string {
	if id == Null {
		return nullName
	}
	for _, p := range predefined {
		if p.id == id {
			return p.name
		}
	}
	if id.runtimeRange() {
		return fmt.Sprintf("memspace(runtime %#x)", uintptr(id))
	}
	return fmt.Sprintf("memspace(%d)", uintptr(id))
}

// ByName returns the memory space with the given omp.h name. The match is
// exact (case-sensitive); callers parsing environment variables, whose values
// OpenMP makes case-insensitive, lower-case first. omp_null_mem_space is found
// too, but it is no memory space (not in All, not Exists).
func ByName(name string) (ID, bool) {
	if name == nullName {
		return Null, true
	}
	for _, p := range predefined {
		if p.name == name {
			return p.id, true
		}
	}
	return Null, false
}

// predefinedSpace reports whether id is one of the predefined memory spaces
// (not Null, not a runtime-made one): one of All's.
func (id ID) predefinedSpace() bool {
	for _, p := range predefined {
		if p.id == id {
			return true
		}
	}
	return false
}

// IsTarget reports whether id is one of the llvm_omp_target memory spaces,
// whose memory comes from a device driver.
func (id ID) IsTarget() bool {
	return id == TargetHost || id == TargetShared || id == TargetDevice
}

// runtimeRange reports whether id lies in the range reserved for memory
// spaces made at run time.
func (id ID) runtimeRange() bool { return id >= firstRuntime }

// All returns the predefined memory spaces, default first, then the other
// host ones, then the target ones. The slice is new on each call.
func All() []ID {
	ids := make([]ID, len(predefined))
	for i, p := range predefined {
		ids[i] = p.id
	}
	return ids
}
