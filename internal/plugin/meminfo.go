package plugin

// MemInfoer is implemented by a device whose driver reports how much of
// its memory is free: CUDA's cuMemGetInfo, HSA's agent attribute
// HSA_AMD_AGENT_INFO_MEMORY_AVAIL beside its VRAM pool's size. Free counts
// what every process and context left, as the driver sees it (not only
// this process's use).
type MemInfoer interface {
	// MemInfo returns the free and total bytes of the device's memory.
	// Where the driver cannot say what is free (an HSA runtime without
	// MEMORY_AVAIL), total is still set and err matches
	// errors.ErrUnsupported.
	MemInfo() (free, total uint64, err error)
}
