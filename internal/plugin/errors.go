package plugin

import "errors"

// ErrOutOfMemory is what a plugin's allocation error matches (errors.Is)
// when the driver had no device memory for it: CUDA_ERROR_OUT_OF_MEMORY,
// HSA_STATUS_ERROR_OUT_OF_RESOURCES from hsa_amd_memory_pool_allocate. The
// generic layer gives back what its device pool caches and retries once on
// it, as LLVM's memory manager and PyTorch's caching allocator do, whatever
// the vendor.
var ErrOutOfMemory = errors.New("out of device memory")
