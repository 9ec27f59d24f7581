package amdgpu

import (
	"errors"
	"slices"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

var _ plugin.PeerCopier = (*device)(nil)

// PeerAccess reports whether this GPU and peer reach each other's VRAM:
// hsa_amd_agent_memory_pool_get_info(ACCESS) of each agent to the other's
// coarse-grained pool is not NEVER_ALLOWED, as ROCclr and LLVM find peers.
// DISALLOWED_BY_DEFAULT is enough: CopyPeer allows access per allocation
// (hsa_amd_agents_allow_access works on buffers, not on pairs). The answer
// is asked once per pair. A device of another plugin is no peer.
func (d *device) PeerAccess(peer plugin.Impl) (bool, error) {
	pd, ok := peer.(*device)
	if !ok || pd == d || pd.tab != d.tab {
		return false, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, d.errorf(ErrClosed, "peer access")
	}
	if can, ok := d.peers[pd]; ok {
		return can, nil
	}
	// An agent without an allocatable coarse-grained pool has no VRAM to
	// reach: no peer, and copies with it take target's pinned bounce.
	if d.fn.agentPoolGetInfo == 0 || d.pools.coarse == nil || pd.pools.coarse == nil {
		d.peers[pd] = false
		return false, nil
	}
	can := true
	for _, ap := range [][2]uint64{{pd.agent, d.pools.coarse.handle}, {d.agent, pd.pools.coarse.handle}} {
		if !can {
			break
		}
		var access uint32
		if err := d.fn.status("hsa_amd_agent_memory_pool_get_info", d.fn.agentPoolGetInfo, uintptr(ap[0]), uintptr(ap[1]), agentPoolInfoAccess, uintptr(unsafe.Pointer(&access))); err != nil {
			return false, d.errorf(err, "peer access to device %d", pd.index)
		}
		can = access != accessNeverAllowed
	}
	d.peers[pd] = can
	return can, nil
}

// CopyPeer copies n bytes from src in srcDev's memory to dst in dstDev's
// memory with hsa_amd_memory_async_copy between the two agents, after
// allowing each agent access to the other's allocation (once per
// allocation). The receiver is one of the two; q, when not nil, is a queue
// of the receiver, and the copy joins its chain of signals.
func (d *device) CopyPeer(dst uintptr, dstDev plugin.Impl, src uintptr, srcDev plugin.Impl, n uintptr, q plugin.QueueImpl) error {
	dd, ok1 := dstDev.(*device)
	sd, ok2 := srcDev.(*device)
	if !ok1 || !ok2 || (d != dd && d != sd) || dd.tab != sd.tab {
		return d.errorf(ErrForeignQueue, "peer copy between devices of another plugin")
	}
	other := dd
	if d == dd {
		other = sd
	}
	if other != d {
		can, err := d.PeerAccess(other)
		if err != nil {
			return err
		}
		if !can {
			return d.errorf(ErrNoPeerAccess, "peer copy with device %d", other.index)
		}
	}
	var dq *queue
	if q != nil {
		var ok bool
		if dq, ok = q.(*queue); !ok || dq.d != d {
			return d.errorf(ErrForeignQueue, "peer copy")
		}
	}
	if err := dd.grant(dst, n, sd); err != nil {
		return err
	}
	if err := sd.grant(src, n, dd); err != nil {
		return err
	}
	spans := []span{{dst: dst, src: src, n: n, dstAgent: dd.agent, srcAgent: sd.agent}}
	if dq != nil {
		if err := dq.submit(spans, loan{}); err != nil {
			return d.errorf(err, "peer copy of %d bytes from device %d to device %d", n, sd.index, dd.index)
		}
		return nil
	}
	own := &queue{d: d}
	err := own.submit(spans, loan{})
	if err != nil {
		err = d.errorf(err, "peer copy of %d bytes from device %d to device %d", n, sd.index, dd.index)
	}
	return errors.Join(err, own.Synchronize())
}

// grant allows peer's agent to reach the allocation of d holding [p, p+n),
// once: hsa_amd_agents_allow_access wants the allocation's base address,
// which hsa_amd_pointer_info gives.
func (d *device) grant(p, n uintptr, peer *device) error {
	if peer == d {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.closed {
			return d.errorf(ErrClosed, "peer copy")
		}
		return nil
	}
	info, err := d.pointerInfo(p)
	if err != nil {
		return err
	}
	base := info.AgentBase
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.errorf(ErrClosed, "peer copy")
	}
	if _, ours := d.allocs[base]; info.Type != pointerTypeHSA || !ours || p-base >= info.SizeInBytes || n > info.SizeInBytes-(p-base) {
		return d.errorf(ErrNotAllocated, "peer copy of %#x+%d", p, n)
	}
	if kind := d.allocs[base]; kind != plugin.MemDevice {
		return nil // host memory is made accessible to every GPU when allocated
	}
	have := d.granted[base]
	if slices.Contains(have, peer.agent) {
		return nil
	}
	agents := append([]uint64{d.agent, peer.agent}, have...)
	if err := d.fn.status("hsa_amd_agents_allow_access", d.fn.allowAccess, uintptr(len(agents)), uintptr(unsafe.Pointer(&agents[0])), 0, base); err != nil {
		return d.errorf(err, "allow device %d access to %#x for a peer copy", peer.index, base)
	}
	d.granted[base] = append(have, peer.agent)
	return nil
}
