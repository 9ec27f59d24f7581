package amdgpu

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/regtab"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// device is one GPU agent. Driver calls that change what it tracks run
// under mu, except the runtime's lock and unlock (the lock table's, which
// may wait for the GPU); none is on a hot path (the generic layer's
// registry answers repeated locks, and a copy costs microseconds anyway).
//
// Lock order: a queue's mu before the device's mu, never the reverse.
type device struct {
	fn    *syms
	index int
	agent uint64   // hsa_agent_t of the GPU
	cpu   uint64   // hsa_agent_t of the CPU whose pool host memory comes from
	gpus  []uint64 // every GPU agent: host memory is made accessible to all
	pools agentPools
	host  *pool // the CPU's fine-grained pool; nil when there is none
	info  plugin.Info

	mu     sync.Mutex
	closed bool
	allocs map[uintptr]plugin.MemKind
	tab    *lockTable // the plugin's locks, shared by its devices
	queues map[*queue]struct{}

	peers   map[*device]bool     // PeerAccess answers, asked once per pair
	granted map[uintptr][]uint64 // allocation → the other GPUs allowed to reach it, for peer copies

	scratch     uintptr // the events' marker buffer (event.go), 0 until the first marker; freed by Close
	scratchPool *pool   // the pool scratch came from
}

func (p *Plugin) newDevice(index int, agent, cpu uint64, gpus []uint64, pools agentPools, host *pool) (*device, error) {
	d := &device{
		fn: &p.fn, index: index, agent: agent, cpu: cpu, gpus: gpus, pools: pools, host: host,
		tab:    p.locks,
		allocs: map[uintptr]plugin.MemKind{},
		queues: map[*queue]struct{}{},
		peers:  map[*device]bool{}, granted: map[uintptr][]uint64{},
	}
	var name, product [agentNameSize]byte
	if err := p.fn.status("hsa_agent_get_info", p.fn.agentGetInfo, uintptr(agent), agentInfoName, uintptr(unsafe.Pointer(&name))); err != nil {
		return nil, err
	}
	gfx := fixedString(name[:])
	d.info = plugin.Info{
		Name: gfx, Vendor: "amd", Driver: p.path, Version: p.version,
		Capability: gfx, NUMANode: -1,
	}
	// The marketing name is an AMD extension; without it the gfx name serves.
	if p.fn.status("hsa_agent_get_info", p.fn.agentGetInfo, uintptr(agent), amdAgentInfoProduct, uintptr(unsafe.Pointer(&product))) == nil {
		if s := fixedString(product[:]); s != "" {
			d.info.Name = s
		}
	}
	if pools.coarse != nil {
		d.info.Memory = pools.coarse.size
	}
	d.info.NUMANode = p.pciNode(agent)
	return d, nil
}

// sysRoot is where sysfs is found; tests point it at a fixture tree.
var sysRoot = "/"

// pciNode is the NUMA node of the agent's PCI slot, -1 when the runtime
// does not give its address or the kernel does not know the node. It is
// only a placement hint, so no answer is no failure.
func (p *Plugin) pciNode(agent uint64) int {
	var bdf, domain uint32 // zeroed: an old runtime writes 16 bits of bdf
	if p.fn.status("hsa_agent_get_info", p.fn.agentGetInfo, uintptr(agent), amdAgentInfoBDFID, uintptr(unsafe.Pointer(&bdf))) != nil {
		return -1
	}
	// A runtime older than the domain attribute: domain 0, the only one on
	// most hosts.
	if p.fn.status("hsa_agent_get_info", p.fn.agentGetInfo, uintptr(agent), amdAgentInfoDomain, uintptr(unsafe.Pointer(&domain))) != nil {
		domain = 0
	}
	id := fmt.Sprintf("%04x:%02x:%02x.%x", domain&0xffff, bdf>>8&0xff, bdf>>3&0x1f, bdf&7)
	node, _ := numa.PCINode(sysRoot, id) // -1 when not ok
	return node
}

func (d *device) Info() plugin.Info { return d.info }

func (d *device) errorf(err error, format string, args ...any) error {
	return &plugin.OpError{Dev: fmt.Sprintf("amdgpu device %d", d.index), Op: fmt.Sprintf(format, args...), Err: err}
}

// Alloc: MemDevice from the GPU's coarse-grained pool; MemHost and MemShared
// from the CPU's fine-grained pool, made accessible to every GPU as LLVM
// does, so that any device can copy from it (see the package documentation
// for why shared is host memory).
func (d *device) Alloc(kind plugin.MemKind, n uintptr) (uintptr, error) {
	var pl *pool
	switch kind {
	case plugin.MemDevice:
		pl = d.pools.coarse
	case plugin.MemHost, plugin.MemShared:
		pl = d.host
	default:
		return 0, d.errorf(sentinel.ErrInvalidArgument, "alloc of %s memory", kind)
	}
	if n == 0 {
		return 0, d.errorf(sentinel.ErrInvalidArgument, "alloc of 0 bytes of %s memory", kind)
	}
	if pl == nil {
		return 0, d.errorf(ErrNoPool, "alloc of %s memory", kind)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, d.errorf(ErrClosed, "alloc")
	}
	var p uintptr
	if err := d.fn.status("hsa_amd_memory_pool_allocate", d.fn.poolAllocate, uintptr(pl.handle), n, 0, uintptr(unsafe.Pointer(&p))); err != nil {
		return 0, d.errorf(err, "alloc of %d bytes of %s memory", n, kind)
	}
	if kind != plugin.MemDevice {
		if err := d.fn.status("hsa_amd_agents_allow_access", d.fn.allowAccess, uintptr(len(d.gpus)), uintptr(unsafe.Pointer(&d.gpus[0])), 0, p); err != nil {
			_ = d.fn.status("hsa_amd_memory_pool_free", d.fn.poolFree, p)
			return 0, d.errorf(err, "alloc of %d bytes of %s memory", n, kind)
		}
	}
	d.allocs[p] = kind
	return p, nil
}

// Free releases memory Alloc returned with the same kind.
func (d *device) Free(kind plugin.MemKind, p uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k, ok := d.allocs[p]; !ok || k != kind {
		return d.errorf(ErrNotAllocated, "free of %s memory at %#x", kind, p)
	}
	if err := d.fn.status("hsa_amd_memory_pool_free", d.fn.poolFree, p); err != nil {
		return d.errorf(err, "free of %s memory at %#x", kind, p)
	}
	delete(d.allocs, p)
	delete(d.granted, p)
	return nil
}

// LockHost locks [p, p+n) for the GPUs and returns the agent pointer, the
// address the GPU uses for p. A range inside one the plugin already locked
// (for any of its devices, or for a transfer in flight) only adds a
// reference to that lock.
func (d *device) LockHost(p, n uintptr) (uintptr, error) {
	if p == 0 || n == 0 || p+n < p {
		return 0, d.errorf(sentinel.ErrInvalidArgument, "lock %#x+%d", p, n)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return 0, d.errorf(ErrClosed, "lock")
	}
	// Without d.mu: the runtime's lock may take long (see lockTable).
	dev, err := d.tab.Lock(d, p, n, func(s regtab.Span) (uintptr, error) { return d.fn.lockFor(d.gpus, s.Host, s.Size) }, agentPointer)
	if err != nil {
		return 0, d.errorf(err, "lock %#x+%d", p, n)
	}
	d.mu.Lock()
	closed = d.closed
	d.mu.Unlock()
	if closed { // closed meanwhile: Close may not have seen this lock
		err := d.tab.Unlock(d, p)
		if errors.Is(err, ErrNotLocked) {
			err = nil // Close released it
		}
		return 0, errors.Join(d.errorf(ErrClosed, "lock"), err)
	}
	return dev, nil
}

// lockLocked locks [p, p+n) for this GPU only, behind the plugin's back (as
// a user calling the runtime would; tests use it).
func (d *device) lockLocked(p, n uintptr) (uintptr, error) {
	return d.fn.lockFor([]uint64{d.agent}, p, n)
}

// UnlockHost releases the most recent LockHost at p. A failed unlock
// (sentinel.ErrStillLocked) keeps the lock, to be retried.
func (d *device) UnlockHost(p uintptr) error {
	if err := d.tab.Unlock(d, p); err != nil {
		return d.errorf(err, "unlock %#x", p)
	}
	return nil
}

// ExternalLock reports whether [p, p+n) lies in memory the GPU can already
// reach without a lock of ours: memory locked with hsa_amd_memory_lock by
// someone else (HSA_EXT_POINTER_TYPE_LOCKED), or host memory of an HSA pool
// (HSA_EXT_POINTER_TYPE_HSA owned by a CPU agent, e.g. another device's host
// allocation), which the runtime refuses to lock and LLVM counts as pinned:
// LockMem on it then succeeds without hsa_amd_memory_lock. A range the plugin
// locked itself is not external: LockHost adds a reference to it. A runtime
// without hsa_amd_pointer_info, or one that locks through SVM (where locked
// memory reads as UNKNOWN), cannot tell of locks made outside the plugin.
//
// Memory of a GPU's pool (VRAM) is refused with ErrDeviceMemory: ROCr
// reports hostBaseAddress == agentBaseAddress for every pool allocation,
// VRAM included (Runtime::PtrInfo: "For device memory, hostBaseAddress is
// either equal to agentBaseAddress or is NULL when the CPU does not have
// access"), so only the owning agent tells host memory from device memory.
func (d *device) ExternalLock(p, n uintptr) (pinreg.External, bool, error) {
	if p == 0 || n == 0 || p+n < p {
		return pinreg.External{}, false, d.errorf(sentinel.ErrInvalidArgument, "external lock query %#x+%d", p, n)
	}
	if d.tab.Holds(p, p, p+1) {
		return pinreg.External{}, false, nil
	}
	info, err := d.pointerInfo(p)
	if err != nil {
		return pinreg.External{}, false, err
	}
	var ext pinreg.External
	switch {
	case info.Type == pointerTypeLocked:
		ext = pinreg.External{Host: info.HostBase, Dev: info.AgentBase, Size: info.SizeInBytes}
	case info.Type == pointerTypeHSA:
		if g, ok := d.ownerGPU(info); ok {
			return pinreg.External{}, false, d.errorf(ErrDeviceMemory, "lock %#x+%d: [%#x, +%d) is memory of amdgpu device %d's pool (VRAM, flags %#x); only host memory can be locked",
				p, n, info.AgentBase, info.SizeInBytes, g, info.GlobalFlags)
		}
		if info.HostBase == 0 {
			return pinreg.External{}, false, nil
		}
		// Host memory of a pool: GPU-accessible already, and the runtime
		// refuses to lock it (hsakmt_fmm_register_memory).
		ext = pinreg.External{Host: info.HostBase, Dev: info.AgentBase, Size: info.SizeInBytes}
	default:
		return pinreg.External{}, false, nil
	}
	if inside := p >= ext.Host && p-ext.Host < ext.Size && n <= ext.Size-(p-ext.Host); !inside {
		return ext, false, d.errorf(ErrPartialExternalLock, "%#x+%d against [%#x, +%d)", p, n, ext.Host, ext.Size)
	}
	return ext, true, nil
}

// ownerGPU reports whether pool memory described by info belongs to a GPU
// agent of the plugin, and which device that is. A runtime whose pointer
// info ends before agentOwner (the first revision) cannot say: then memory
// without a host address is taken for VRAM, as those runtimes reported it.
func (d *device) ownerGPU(info pointerInfo) (int, bool) {
	if uintptr(info.Size) < unsafe.Offsetof(info.AgentOwner)+unsafe.Sizeof(info.AgentOwner) {
		return -1, info.HostBase == 0
	}
	i := slices.Index(d.gpus, info.AgentOwner)
	return i, i >= 0
}

// pointerInfo asks what the runtime knows of p; a runtime without
// hsa_amd_pointer_info knows nothing (type unknown).
func (d *device) pointerInfo(p uintptr) (pointerInfo, error) {
	info := pointerInfo{Size: uint32(unsafe.Sizeof(pointerInfo{}))}
	if d.fn.pointerInfo == 0 {
		return info, nil
	}
	if err := d.fn.status("hsa_amd_pointer_info", d.fn.pointerInfo, p, uintptr(unsafe.Pointer(&info)), 0, 0, 0); err != nil {
		return info, d.errorf(err, "pointer info of %#x", p)
	}
	return info, nil
}

// reach splits host range [p, p+n) into pieces and gives the address this
// GPU uses for each, and the references on the plugin's locks the copy
// holds until it completed (the caller releases them). A range the plugin
// locked is found in its lock table, with the agent pointer from lock time,
// without asking the runtime; a copy may start inside such a range and run
// past its end. What lies outside is asked of the runtime: memory locked
// outside the plugin or from an HSA pool is used as it is; pageable memory
// is locked for the transfer (shared with other transfers in flight).
func (d *device) reach(p, n uintptr) ([]piece, loan, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, loan{}, d.errorf(ErrClosed, "copy")
	}
	parts, loan, err := d.tab.Borrow(p, n, func(q, end uintptr) (uintptr, uintptr, bool, error) {
		pc, locked, err := d.gap(q, end)
		return pc.n, pc.addr, locked, err
	})
	if err != nil {
		return nil, loan, err
	}
	ps := make([]piece, len(parts))
	for i, pt := range parts {
		ps[i] = piece{off: pt.Off, n: pt.N, addr: pt.Val + (p + pt.Off - pt.Base)}
	}
	return ps, loan, nil
}

// gap answers for host range [q, end), which holds no lock of the plugin at
// q: how much of it the GPU reaches at which address, and whether that is a
// lock just taken for the transfer.
func (d *device) gap(q, end uintptr) (piece, bool, error) {
	info, err := d.pointerInfo(q)
	if err != nil {
		return piece{}, false, err
	}
	switch info.Type {
	case pointerTypeLocked:
		if q >= info.HostBase && q-info.HostBase < info.SizeInBytes {
			k := min(end-q, info.SizeInBytes-(q-info.HostBase))
			return piece{n: k, addr: info.AgentBase + (q - info.HostBase)}, false, nil
		}
		return piece{n: end - q, addr: q}, false, nil // already the agent pointer
	case pointerTypeHSA:
		if q >= info.AgentBase && q-info.AgentBase < info.SizeInBytes {
			return piece{n: min(end-q, info.SizeInBytes-(q-info.AgentBase)), addr: q}, false, nil
		}
		return piece{n: end - q, addr: q}, false, nil
	}
	if d.fn.pointerInfo == 0 {
		return piece{n: end - q, addr: q}, false, nil // cannot tell; trust the caller
	}
	dev, err := d.fn.lockFor(d.gpus, q, end-q)
	if err != nil {
		return piece{}, false, d.errorf(err, "lock of pageable %#x+%d for a copy", q, end-q)
	}
	return piece{n: end - q, addr: dev}, true, nil
}

// span is one hsa_amd_memory_async_copy; agents 0 are the queue's device.
type span struct {
	dst, src, n        uintptr
	dstAgent, srcAgent uint64
}

// Copy copies n bytes with hsa_amd_memory_async_copy, one copy per piece of
// the host range (see reach); with q == nil it waits for the copy. The
// arguments were checked by the generic layer (plugin.Impl.Copy's
// contract): n > 0, no nil or wrapping range, no host-to-host copy, q this
// device's.
func (d *device) Copy(dst, src, n uintptr, dir plugin.Direction, q plugin.QueueImpl) error {
	var dq *queue
	if q != nil {
		var ok bool
		if dq, ok = q.(*queue); !ok {
			return d.errorf(ErrForeignQueue, "copy %s on a queue of another plugin (%T)", dir, q)
		}
	}
	var spans []span
	var refs loan
	switch dir {
	case plugin.HostToDevice, plugin.DeviceToHost:
		host := src
		if dir == plugin.DeviceToHost {
			host = dst
		}
		ps, rs, err := d.reach(host, n)
		if err != nil {
			return err
		}
		refs = rs
		for _, pc := range ps {
			if dir == plugin.HostToDevice {
				spans = append(spans, span{dst: dst + pc.off, src: pc.addr, n: pc.n})
			} else {
				spans = append(spans, span{dst: pc.addr, src: src + pc.off, n: pc.n})
			}
		}
	case plugin.DeviceToDevice:
		d.mu.Lock()
		closed := d.closed
		d.mu.Unlock()
		if closed {
			return d.errorf(ErrClosed, "copy")
		}
		spans = []span{{dst: dst, src: src, n: n}}
	default:
		return d.errorf(sentinel.ErrInvalidArgument, "copy in direction %d", dir)
	}
	if dq != nil {
		if err := dq.submit(spans, refs); err != nil {
			return d.errorf(err, "copy %s of %d bytes", dir, n)
		}
		return nil
	}
	// Synchronous: a chain of its own, waited for. Pieces submitted before
	// a failure are waited for too: their memory must not go while read.
	own := &queue{d: d}
	err := own.submit(spans, refs)
	if err != nil {
		err = d.errorf(err, "copy %s of %d bytes", dir, n)
	}
	return errors.Join(err, own.Synchronize())
}

// NewQueue creates an in-order queue: a chain of completion signals.
func (d *device) NewQueue() (plugin.QueueImpl, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, d.errorf(ErrClosed, "new queue")
	}
	q := &queue{d: d}
	d.queues[q] = struct{}{}
	return q, nil
}

// Close waits for and destroys the queues, frees what Alloc returned and
// undoes what LockHost locked. Later calls fail with ErrClosed.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qs := make([]*queue, 0, len(d.queues))
	for q := range d.queues {
		qs = append(qs, q)
	}
	d.mu.Unlock()
	var errs []error
	for _, q := range qs {
		errs = append(errs, q.Destroy())
	}
	d.mu.Lock()
	for p, kind := range d.allocs {
		if err := d.fn.status("hsa_amd_memory_pool_free", d.fn.poolFree, p); err != nil {
			errs = append(errs, d.errorf(err, "free of %s memory at %#x", kind, p))
		}
		delete(d.allocs, p)
	}
	errs = append(errs, d.freeScratchLocked())
	d.mu.Unlock()
	if err := d.tab.ReleaseAll(d); err != nil {
		errs = append(errs, d.errorf(err, "unlock at close"))
	}
	return errors.Join(errs...)
}

// newSignal creates a completion signal with value 1; the copy it is given
// to decrements it to 0.
func (s *syms) newSignal() (uint64, error) {
	var sig uint64
	err := s.status("hsa_signal_create", s.signalCreate, 1, 0, 0, uintptr(unsafe.Pointer(&sig)))
	return sig, err
}

func (s *syms) destroySignal(sig uint64) error {
	return s.status("hsa_signal_destroy", s.signalDestroy, uintptr(sig))
}

// asyncCopy submits a copy between dst of dstAgent and src of srcAgent
// (LLVM passes the GPU's agent for both sides once the host side is an
// agent pointer, and each device's agent for a copy between two GPUs), after
// dep when it is not 0, completing sig.
func (s *syms) asyncCopy(dst uintptr, dstAgent uint64, src uintptr, srcAgent uint64, n uintptr, dep, sig uint64) error {
	var ndeps uintptr
	if dep != 0 {
		ndeps = 1
	}
	return s.status("hsa_amd_memory_async_copy", s.memAsyncCopy, dst, uintptr(dstAgent), src, uintptr(srcAgent), n, ndeps, uintptr(unsafe.Pointer(&dep)), uintptr(sig))
}

// done reports whether sig reached 0.
func (s *syms) done(sig uint64) bool {
	return int64(raw(s.signalLoad, uintptr(sig))) <= 0
}

// waitZero blocks until sig reaches 0. The runtime may return early
// (timeouts are hints), hence the loop.
func (s *syms) waitZero(sig uint64) {
	for int64(raw(s.signalWait, uintptr(sig), signalConditionEQ, 0, ^uintptr(0), waitStateBlocked)) > 0 {
	}
}
