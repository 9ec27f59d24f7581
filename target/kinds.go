package target

import "github.com/ompalloc/ompalloc/internal/plugin"

// MemKind is the kind of memory a device allocates, as OpenMP's
// omp_target_alloc_device, _host and _shared do. Its String method gives
// "device", "host" or "shared".
type MemKind = plugin.MemKind

const (
	MemDevice = plugin.MemDevice // device memory, not host accessible (omp_target_alloc_device)
	MemHost   = plugin.MemHost   // pinned host memory the device can access (omp_target_alloc_host)
	MemShared = plugin.MemShared // managed memory migrating between host and device (omp_target_alloc_shared)
)

// Info describes a device: Name ("NVIDIA H200", "gfx90a", "host"), Vendor
// ("nvidia", "amd", "host"), Driver (the library path loaded, "" for the
// host), Version, Memory (total bytes; the host's physical memory),
// Capability (compute capability or gfx name) and NUMANode (-1 when
// unknown).
type Info = plugin.Info

// DriverStatus is what Plugins reports about each vendor's driver: Plugin
// ("cuda", "amdgpu"), Library (the path loaded, "" when none), Version, Init
// (the driver's answer to initialisation, e.g. "CUDA_ERROR_NO_DEVICE"), Err
// (a *DriverError; nil when the driver is usable) and Advice (DriverError's).
type DriverStatus = plugin.Status

// ErrOutOfMemory is what a device allocation's error matches (errors.Is)
// when the driver had no device memory left, after the device pool gave back
// what it cached and the allocation was retried once.
var ErrOutOfMemory = plugin.ErrOutOfMemory
