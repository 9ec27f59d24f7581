package amdgpu

import (
	"errors"
	"fmt"
	"unsafe"
)

// amdAgentInfoMemoryAvail is HSA_AMD_AGENT_INFO_MEMORY_AVAIL (hsa_ext_amd.h):
// "the amount of memory available in bytes accross all global pools owned
// by the agent", a uint64_t. Runtimes older than the attribute refuse it
// with HSA_STATUS_ERROR_INVALID_ARGUMENT.
const amdAgentInfoMemoryAvail = 0xA015

// MemInfo returns the GPU's available memory (MEMORY_AVAIL) and its total,
// the size of its coarse-grained VRAM pool (HSA_AMD_MEMORY_POOL_INFO_SIZE,
// what Info().Memory says). Without the attribute the total is still
// returned, with an error matching errors.ErrUnsupported.
func (d *device) MemInfo() (free, total uint64, err error) {
	total = d.info.Memory
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return 0, total, d.errorf(ErrClosed, "memory info")
	}
	var avail uint64
	if err := d.fn.status("hsa_agent_get_info", d.fn.agentGetInfo, uintptr(d.agent), amdAgentInfoMemoryAvail, uintptr(unsafe.Pointer(&avail))); err != nil {
		return 0, total, d.errorf(fmt.Errorf("free memory (HSA_AMD_AGENT_INFO_MEMORY_AVAIL): %w: %w", errors.ErrUnsupported, err), "memory info")
	}
	return avail, total, nil
}
