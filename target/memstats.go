package target

// Device memory you can see: per-device figures of every device-memory
// path, in the shape of PyTorch's torch.cuda.memory_stats, and the
// driver's own free and total (torch.cuda.mem_get_info).

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// MemoryStats is one device's device memory as ompalloc handed it out,
// what torch.cuda.memory_stats reports for PyTorch's caching allocator
// (the field comments give its key). Every path counts: Device.Alloc of
// device memory (AllocArray and the typed forms included) and the device
// pool (PoolAlloc, omp_target_alloc, allocators on a device memory space).
type MemoryStats struct {
	// Allocated is the bytes of device memory handed out and not freed
	// (allocated_bytes.all.current; torch.cuda.memory_allocated).
	Allocated uint64 `json:"allocated"`
	// PeakAllocated is the most Allocated reached since the device's first
	// use or ResetPeakMemoryStats (allocated_bytes.all.peak;
	// torch.cuda.max_memory_allocated).
	PeakAllocated uint64 `json:"peak_allocated"`
	// Reserved is the bytes held from the driver: direct allocations and
	// what the pool reserved, in use or cached (reserved_bytes.all.current;
	// torch.cuda.memory_reserved).
	Reserved uint64 `json:"reserved"`
	// PeakReserved is the most Reserved reached since the first use or the
	// reset (torch.cuda.max_memory_reserved), followed at every change of
	// the reservation: each direct allocation, each block the size-class
	// cache gets from or gives back to the driver, and with the driver's
	// pool the reserved bytes the driver reports after each allocation and
	// trim (they grow only at an allocation). With a pool limit set, the
	// driver may also give memory back at a synchronization, which ompalloc
	// sees at the next reading: a direct allocation in between counts the
	// pool at its last reading.
	PeakReserved uint64 `json:"peak_reserved"`
	// Allocs and Frees count the allocations and frees of device memory
	// (allocation.all.allocated and .freed); Live is Allocs - Frees.
	Allocs uint64 `json:"allocs"`
	Frees  uint64 `json:"frees"`
	Live   uint64 `json:"live"`
	// Direct is the bytes of Device.Alloc(MemDevice) blocks live,
	// PoolInUse those of pool blocks handed out (as asked, not rounded).
	Direct    uint64 `json:"direct"`
	PoolInUse uint64 `json:"pool_in_use"`
	// Pool is the device pool's own figures: reserved against in use, and
	// the size-class cache's hits and misses (PoolStats says which pool).
	Pool PoolStats `json:"pool"`
	// Staging is the pinned host memory of the device's staging buffers:
	// host memory, given for the whole picture of what ompalloc holds.
	Staging uint64 `json:"staging"`
	// Free and Total are the driver's figures (MemGetInfo), 0 where it
	// cannot say (the host, an HSA runtime without MEMORY_AVAIL).
	Free, Total uint64
}

// MemoryStats reports d's device memory. It asks the driver for the free
// and total memory (one driver call) and, with the driver's pool, for the
// pool's reserved bytes.
func (d *Device) MemoryStats() MemoryStats {
	st := d.mem.snapshot()
	st.Pool = d.poolStats()
	st.Reserved = st.Direct + uint64(st.Pool.Reserved)
	st.PeakReserved = max(d.mem.peakReserved(), st.Reserved) // poolStats took the driver's reading: the same unless a block came meanwhile
	st.Staging = uint64(d.StagingStats().PoolBytes)
	st.Free, st.Total, _ = d.MemGetInfo()
	return st
}

// ResetPeakMemoryStats makes the peaks (PeakAllocated, PeakReserved) the
// current figures, as torch.cuda.reset_peak_memory_stats does.
func (d *Device) ResetPeakMemoryStats() {
	reserved := d.mem.directBytes() + uint64(d.poolStats().Reserved)
	d.mem.resetPeak(reserved)
}

// MemGetInfo returns the free and total bytes of d's memory as its driver
// reports them (torch.cuda.mem_get_info; cuMemGetInfo on CUDA, the GPU
// agent's HSA_AMD_AGENT_INFO_MEMORY_AVAIL and VRAM pool size on HSA). Free
// is the whole device's, other processes included. Where the driver cannot
// say what is free, total is still returned with an error matching
// errors.ErrUnsupported; the host device says ErrUnsupported.
func (d *Device) MemGetInfo() (free, total uint64, err error) {
	if err := d.usable(); err != nil {
		return 0, 0, err
	}
	mi, ok := d.impl.(plugin.MemInfoer)
	if !ok {
		return 0, 0, fmt.Errorf("device %d: memory info: %w: the %s plugin does not report free memory", d.ID, errors.ErrUnsupported, d.plugin)
	}
	free, total, err = mi.MemInfo()
	if err != nil {
		return free, total, fmt.Errorf("device %d: memory info: %w", d.ID, plugin.Cause(err))
	}
	return free, total, nil
}

// memPath is where a block of device memory came from.
type memPath uint8

const (
	pathDirect memPath = iota // Device.Alloc of MemDevice
	pathPool                  // the device pool
)

func (p memPath) String() string { return [...]string{"direct", "pool"}[p] }

// devMem keeps one device's books of device memory: every block handed
// out and not freed, the totals and peaks, the addresses freed lately (to
// name a double free), and the timeline while one is recorded.
type devMem struct {
	mu        sync.Mutex
	live      map[uintptr]memBlock
	bytes     [2]uint64 // live bytes by path
	peak      uint64    // the most bytes live
	poolRes   uint64    // the device pool's reserved bytes (devPool.reservedLocked keeps it current)
	peakRes   uint64    // the most reserved bytes: direct bytes + poolRes
	allocs    uint64
	frees     uint64
	freed     map[uintptr]memPath // recently freed addresses, for the double-free message
	freedSize map[uintptr]uintptr // their sizes
	freedLog  []uintptr           // freed's order, oldest first (at most keepFreed)
}

type memBlock struct {
	size uintptr
	path memPath
}

// keepFreed bounds the freed addresses remembered for the double-free
// message.
const keepFreed = 4096

func (m *devMem) alloc(p, n uintptr, path memPath) (allocated uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live == nil {
		m.live = map[uintptr]memBlock{}
	}
	m.live[p] = memBlock{n, path}
	delete(m.freed, p) // the address is live again
	delete(m.freedSize, p)
	m.bytes[path] += uint64(n)
	m.allocs++
	cur := m.bytes[pathDirect] + m.bytes[pathPool]
	m.peak = max(m.peak, cur)
	m.peakRes = max(m.peakRes, m.bytes[pathDirect]+m.poolRes)
	return cur
}

// free takes p off the books and reports its size and the bytes then
// allocated; ok is false when p was not live there through path.
func (m *devMem) free(p uintptr, path memPath) (size uintptr, allocated uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.live[p]
	if !ok || b.path != path {
		return 0, 0, false
	}
	delete(m.live, p)
	m.bytes[path] -= uint64(b.size)
	m.frees++
	if m.freed == nil {
		m.freed = map[uintptr]memPath{}
	}
	m.freed[p] = path
	if m.freedSize == nil {
		m.freedSize = map[uintptr]uintptr{}
	}
	m.freedSize[p] = b.size
	m.freedLog = append(m.freedLog, p)
	if len(m.freedLog) > keepFreed {
		old := m.freedLog[0]
		m.freedLog = m.freedLog[1:]
		if _, live := m.live[old]; !live {
			delete(m.freed, old)
			delete(m.freedSize, old)
		}
	}
	return b.size, m.bytes[pathDirect] + m.bytes[pathPool], true
}

// setPoolReserved takes the pool's reserved bytes now and raises the
// reserved peak to match.
func (m *devMem) setPoolReserved(r uint64) {
	m.mu.Lock()
	m.poolRes = r
	m.peakRes = max(m.peakRes, m.bytes[pathDirect]+r)
	m.mu.Unlock()
}

func (m *devMem) peakReserved() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakRes
}

// lastFreedSize is the size of the block freed last at p.
func (m *devMem) lastFreedSize(p uintptr) uintptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.freedSize[p]
}

// wasFreed reports whether p was freed lately through path and not
// handed out again: a second free of it is a double free.
func (m *devMem) wasFreed(p uintptr, path memPath) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q, ok := m.freed[p]
	return ok && q == path
}

func (m *devMem) directBytes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes[pathDirect]
}

func (m *devMem) snapshot() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoryStats{
		Allocated: m.bytes[pathDirect] + m.bytes[pathPool], PeakAllocated: m.peak, PeakReserved: m.peakRes,
		Allocs: m.allocs, Frees: m.frees, Live: m.allocs - m.frees,
		Direct: m.bytes[pathDirect], PoolInUse: m.bytes[pathPool],
	}
}

func (m *devMem) resetPeak(reserved uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peak = m.bytes[pathDirect] + m.bytes[pathPool]
	m.peakRes = max(reserved, m.peak)
}

// doubleFree is the error of a free of device memory freed already.
func doubleFree(dev int, p uintptr, what string) error {
	return fmt.Errorf("device %d: free of %s at %#x: %w: it was freed already (a double free)", dev, what, p, ErrInvalidArgument)
}

// memAlloc puts a block of device memory handed out on d's books, and in
// memprof's heap profile when sampled (labelled memspace "device N").
func (d *Device) memAlloc(p, n uintptr, path memPath) {
	allocated := d.mem.alloc(p, n, path)
	if memsample.On() && memsample.Tick(n) {
		memsample.Record(p, n, memsample.Labels{Allocator: "device " + path.String(), Memspace: fmt.Sprintf("device %d", d.ID)}, 1)
	}
	if recording.Load() {
		d.record(p, n, path, true, allocated)
	}
}

// memFree takes a block off d's books; false: it was not on them. Call it
// before the block can be handed out again.
func (d *Device) memFree(p uintptr, path memPath) bool {
	size, allocated, ok := d.mem.free(p, path)
	if ok {
		memsample.Forget(p)
	}
	if ok && recording.Load() {
		d.record(p, size, path, false, allocated)
	}
	return ok
}

// PoolAlloc returns n bytes of device memory of d from d's pool, for use
// on q (nil: for any use, at once). With the size-class cache it asks the
// driver only when no cached block of the size class may be reused by q;
// with the driver's stream-ordered pool it is one cuMemAllocFromPoolAsync
// on q's stream (without a queue, on a stream of the pool's, synchronized
// before returning). Free it with PoolFree.
//
// The block counts in MemoryStats (and a recorded timeline) until freed.
func (d *Device) PoolAlloc(n uintptr, q *Queue) (uintptr, error) {
	p, err := d.poolAlloc(n, q)
	if err == nil {
		d.memAlloc(p, n, pathPool)
	}
	return p, err
}

// PoolFree returns a block PoolAlloc handed out. With q, the work issued
// on q may still use it: q's later allocations may reuse it at once, the
// others once that work completed. Without a queue it is reused once the
// work issued so far on every queue of the device has completed; the host
// never waits. Work on another device's queues (a peer copy into the
// block) is not looked for: synchronize that queue before the free.
//
// A block freed already is refused with an error saying so.
func (d *Device) PoolFree(p uintptr, q *Queue) error {
	// Off the books before the pool may hand the block out again.
	if !d.memFree(p, pathPool) {
		if d.mem.wasFreed(p, pathPool) {
			return doubleFree(d.ID, p, "a device pool block")
		}
		return d.poolFree(p, q) // not a block of the pool: its error says so
	}
	if err := d.poolFree(p, q); err != nil {
		d.mem.alloc(p, d.mem.lastFreedSize(p), pathPool) // still the caller's
		return err
	}
	return nil
}
