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
//   - LockHost = hsa_amd_memory_lock for the GPU's agent, returning the agent
//     pointer; UnlockHost = hsa_amd_memory_unlock; ExternalLock asks
//     hsa_amd_pointer_info whether a range was locked by someone else;
//   - copies with hsa_amd_memory_async_copy, completion signals and, on a
//     queue, each copy depending on the previous one's signal. The host side
//     of a copy must be memory the GPU can reach: locked or pool memory is
//     used as is (a locked host pointer is translated to its agent pointer);
//     pageable memory is locked for the duration of the copy.
//
// A missing library, a disabled one (OMPALLOC_DISABLE_HSA=1) or a failing
// hsa_init (HSA_STATUS_ERROR_OUT_OF_RESOURCES without /dev/kfd) leave the
// plugin with no devices and an error that says why; nothing panics.
// OMPALLOC_HSA_LIBRARY names the library to load instead of the defaults.
//
// Driver errors are *Error values carrying the call, the hsa_status_t and
// the runtime's own name for it from hsa_status_string.
package amdgpu
