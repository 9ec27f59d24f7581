// Package memspace names the OpenMP memory spaces, with the handle values of
// LLVM's omp.h, and says what memory backs each one on this host.
//
// # Handles
//
// The numbering follows LLVM's current omp.h (OpenMP 6.0 era):
// omp_null_mem_space is 0 and omp_default_mem_space is 99. LLVM 16's omp.h
// still had omp_default_mem_space = 0; code that passes raw numbers from an old
// header must translate.
//
// # What backs each memory space
//
// This runtime does not use memkind, libnuma or hwloc: it reads the NUMA
// topology from sysfs (internal/numa) and places memory with mbind(2).
// omp_default_mem_space is every node with memory. omp_high_bw_mem_space is
// the high-bandwidth nodes (memory-only nodes whose HMAT bandwidth exceeds
// the CPU nodes', or in a faster memory tier: HBM in flat mode) and
// omp_large_cap_mem_space the capacity nodes (memory-only nodes slower by
// HMAT or memory tier: CXL expanders); allocators on them bind their chunks
// to those nodes. Where the machine has no such nodes — most machines —
// they, omp_low_lat_mem_space and omp_const_mem_space are backed by default
// host memory, exactly as omp_default_mem_space: allocators made on them
// succeed and hand out ordinary host memory. This is what GCC's libgomp
// does. LLVM's libomp differs for one of them: without memkind it returns
// the null allocator for a custom allocator on omp_high_bw_mem_space,
// because it cannot find high-bandwidth memory. We prefer an allocator that
// works; Describe reports the substitution (Backing.BackedBy is Default) and
// the nodes with the reason, so that a program or `ompalloc info` can see it.
//
// The NUMA nodes of a host memory space are its resources
// (omp_get_memspace_num_resources); OnNodes makes the sub-memory space of
// some of them (omp_get_submemspace).
//
// The three llvm_omp_target memory spaces are backed by a device driver:
// page-locked host memory, memory shared between host and device, and device
// memory. Whether a driver and device are present is decided by the target
// packages, not here.
//
// # Memory spaces made at run time
//
// OpenMP 6.0 adds memory spaces made at run time (for example by
// omp_get_device_memspace). Their handles are allocated by the runtime from
// 0x1000 upwards; values below it are reserved for the
// predefined memory spaces of omp.h. All lists the predefined ones;
// OnDevices and OnNodes make the others, and DevicesOf describes one;
// Exists reports whether a handle is either.
package memspace
