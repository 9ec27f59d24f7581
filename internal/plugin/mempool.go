package plugin

// MemPooler is implemented by an Impl whose driver has a stream-ordered
// allocator of its own (CUDA's cuMemAllocFromPoolAsync and cuMemFreeAsync,
// where the device reports CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).
// target serves Device.PoolAlloc/PoolFree from it; without it, or when
// MemPool answers nil, target keeps its own size-class cache of device
// memory. The generic part (which queues a free waits for, the limit, the
// accounting of what was handed out) stays in target.
type MemPooler interface {
	// MemPool returns the device's stream-ordered pool, or nil when the
	// device or the driver has none (an older driver, missing symbols).
	// The answer must not change, and must come without a driver call
	// after the first one.
	MemPool() MemPool
}

// MemPool is a device's stream-ordered pool of device memory. Its methods
// are safe for concurrent use.
type MemPool interface {
	// Alloc allocates n bytes of device memory in q's order: q's work
	// issued afterwards may use it. With q nil the memory is usable by
	// anything (any queue, synchronous copies) when Alloc returns.
	Alloc(n uintptr, q QueueImpl) (uintptr, error)

	// Free frees p, which Alloc returned, in q's order: q's work issued
	// before the free may still use it, and the driver hands it to another
	// queue only once that work completed. With q nil it is freed once the
	// work issued so far on every queue of after has completed (the host
	// does not wait); after lists the device's open queues.
	Free(p uintptr, q QueueImpl, after []QueueImpl) error

	// Stats reads the bytes the pool reserves from the device and the
	// bytes of the blocks handed out, as the driver counts them. It may
	// cost driver calls: it is not for hot paths.
	Stats() (reserved, used uint64, err error)

	// SetReleaseThreshold sets the bytes the pool keeps reserved when
	// idle (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: above it, free memory goes
	// back to the device at the next synchronization).
	SetReleaseThreshold(n uint64) error

	// Trim gives free memory back to the device until at most keep bytes
	// are reserved (cuMemPoolTrimTo); memory whose free has not completed
	// stays.
	Trim(keep uintptr) error

	// Reuse reports, without a driver call, the allocations so far that
	// the pool served from memory it had reserved already (hits) and those
	// for which it reserved more from the device (misses), and the bytes
	// reserved as read after the latest allocation, trim or Stats.
	Reuse() (hits, misses, reserved uint64)
}
