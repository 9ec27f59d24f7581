// Package amdgpu is the device plugin for AMD GPUs: ROCm's HSA runtime
// (libhsa-runtime64.so.1) loaded at first use through purego, with no cgo.
//
// Init calls hsa_init and enumerates the agents (hsa_iterate_agents) and
// their memory pools (hsa_amd_agent_iterate_memory_pools) through one purego
// callback created once per process; the iteration's context travels through
// the C `void *data` argument as an integer key into a Go-side table, never
// as a Go pointer. Each GPU agent becomes a device with:
//
//   - MemDevice from the GPU's coarse-grained global pool (VRAM);
//   - MemHost from the CPU agent's fine-grained global pool, made accessible
//     to every GPU with hsa_amd_agents_allow_access (as LLVM does), so that
//     any device may copy from it;
//   - MemShared the same as MemHost, as LLVM's AMDGPU plugin does for
//     TARGET_ALLOC_SHARED: fine-grained system memory is coherent between
//     host and GPU, and AMD has no managed memory that migrates like CUDA's;
//   - LockHost = hsa_amd_memory_lock for every GPU agent (as LLVM locks with
//     no agent list), returning the agent pointer; UnlockHost =
//     hsa_amd_memory_unlock. The plugin keeps every range it locked, with
//     the agent pointer from lock time, in one table for all its devices
//     (internal/regtab, the process's table of its locks): a
//     lock inside a range already locked (by another device, or for a
//     transfer) adds a reference, and the last reference unlocks. It never
//     asks the runtime again about its own locks, because where libhsakmt
//     locks through the KFD SVM API (current GPUs, unless HSA_USE_SVM=0)
//     hsa_amd_pointer_info answers HSA_EXT_POINTER_TYPE_UNKNOWN for locked
//     memory. ExternalLock asks hsa_amd_pointer_info whether a range was
//     locked by someone else (with SVM it cannot tell) or is host memory of
//     an HSA pool (HSA_EXT_POINTER_TYPE_HSA owned by a CPU agent), which is
//     GPU-accessible already and which the runtime refuses to lock: LockMem
//     on it counts references and never calls hsa_amd_memory_lock. Memory
//     of a GPU's pool (VRAM, which ROCr also reports with a host address) is
//     refused with ErrDeviceMemory. ROCr's unlock counts nothing and returns
//     success even for memory not locked: a failed unlock (before it did
//     anything) is reported as sentinel.ErrStillLocked, to be retried;
//   - copies with hsa_amd_memory_async_copy, completion signals and, on a
//     queue, each copy depending on the previous one's signal. The host side
//     of a copy must be memory the GPU can reach: ranges in the lock table
//     use their agent pointer from lock time; locked or pool memory the
//     runtime describes is used as is; pageable memory is locked for the
//     duration of the copy (a lock that copies in flight share). The host
//     range is split where locks begin and end, one async copy per piece,
//     so a copy may start inside a locked range and run past its end (a
//     user-locked prefix; two copies in flight from one pageable base with
//     different sizes), as on CUDA. Every copy
//     holds a reference on the locks it reads, so an unlock while it is in
//     flight takes effect when it completed.
//   - copies between two GPUs of the plugin (plugin.PeerCopier): PeerAccess
//     asks each agent's access to the other's VRAM pool
//     (hsa_amd_agent_memory_pool_get_info); CopyPeer allows the other agent
//     access to both allocations once (hsa_amd_agents_allow_access) and
//     copies with hsa_amd_memory_async_copy between the two agents.
//
// A missing library, a disabled one (OMPALLOC_DISABLE_HSA=1) or a failing
// hsa_init (HSA_STATUS_ERROR_OUT_OF_RESOURCES without /dev/kfd) leave the
// plugin with no devices and an error that says why; nothing panics.
// OMPALLOC_HSA_LIBRARY names the library to load instead of the defaults.
//
// Driver errors are *Error values carrying the call, the hsa_status_t and
// the runtime's own name for it from hsa_status_string.
package amdgpu
