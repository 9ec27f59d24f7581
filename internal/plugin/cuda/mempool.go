package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// The stream-ordered allocator (CUDA ≥ 11.2). Values from cuda.h:
//
//	CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115, /**< Device supports using the ::cuMemAllocAsync and ::cuMemPool family of APIs */
//	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1, CU_MEM_HANDLE_TYPE_NONE = 0x0, CU_MEM_LOCATION_TYPE_DEVICE = 0x1
//	typedef enum CUmemPool_attribute_enum {
//	  CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1, ..._REUSE_ALLOW_OPPORTUNISTIC, ..._REUSE_ALLOW_INTERNAL_DEPENDENCIES,
//	  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
//	  CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH } CUmemPool_attribute;
const (
	cuDeviceAttributeMemoryPoolsSupported       = 115
	cuMemAllocationTypePinned                   = 1
	cuMemLocationTypeDevice                     = 1
	cuMemAccessFlagsProtReadWrite               = 3 // CUmemAccess_flags
	cuMempoolAttrReuseAllowInternalDependencies = 3 // int
	cuMempoolAttrReleaseThreshold               = 4 // cuuint64_t
	cuMempoolAttrReservedMemCurrent             = 5 // cuuint64_t
	cuMempoolAttrUsedMemCurrent                 = 7 // cuuint64_t
)

// cuMemPoolProps is CUmemPoolProps (cuda.h; CUDA 12 split the old
// reserved[64] into maxSize, usage and reserved[54], the size is the same):
//
//	CUmemAllocationType allocType; CUmemAllocationHandleType handleTypes;
//	CUmemLocation location; void *win32SecurityAttributes; size_t maxSize;
//	unsigned short usage; unsigned char reserved[54];
//
// Zeroed but for the type and location: maxSize 0 is the default.
type cuMemPoolProps struct {
	allocType, handleTypes int32
	locType, locID         int32
	win32                  uintptr
	maxSize                uintptr
	usage                  uint16
	reserved               [54]byte
}

// The struct must be the 88 bytes of cuda.h on every 64-bit target.
var (
	_ [unsafe.Sizeof(cuMemPoolProps{}) - 88]struct{}
	_ [88 - unsafe.Sizeof(cuMemPoolProps{})]struct{}
)

// cuMemAccessDesc is CUmemAccessDesc (cuda.h): CUmemLocation location
// {type, id}; CUmemAccess_flags flags.
type cuMemAccessDesc struct {
	locType, locID, flags int32
}

var (
	_ [unsafe.Sizeof(cuMemAccessDesc{}) - 12]struct{}
	_ [12 - unsafe.Sizeof(cuMemAccessDesc{})]struct{}
)

// poolSyms are the optional symbols of the stream-ordered allocator.
// cuMemPoolSetAccess is optional among them: without it a peer reaches the
// pool's blocks only through cuMemcpyPeerAsync's staged path.
type poolSyms struct {
	cuMemPoolCreate, cuMemPoolDestroy, cuMemAllocFromPoolAsync, cuMemFreeAsync uintptr
	cuMemPoolSetAttribute, cuMemPoolGetAttribute, cuMemPoolTrimTo              uintptr
	cuMemPoolSetAccess                                                         uintptr
}

func (t *poolSyms) poolTable(opt func(string, *uintptr) entry) []entry {
	return []entry{
		opt("cuMemPoolCreate", &t.cuMemPoolCreate),
		opt("cuMemPoolDestroy", &t.cuMemPoolDestroy),
		opt("cuMemAllocFromPoolAsync", &t.cuMemAllocFromPoolAsync),
		opt("cuMemFreeAsync", &t.cuMemFreeAsync),
		opt("cuMemPoolSetAttribute", &t.cuMemPoolSetAttribute),
		opt("cuMemPoolGetAttribute", &t.cuMemPoolGetAttribute),
		opt("cuMemPoolTrimTo", &t.cuMemPoolTrimTo),
		opt("cuMemPoolSetAccess", &t.cuMemPoolSetAccess),
	}
}

func (d *driver) hasPools() bool {
	return d.cuMemPoolCreate != 0 && d.cuMemPoolDestroy != 0 && d.cuMemAllocFromPoolAsync != 0 &&
		d.cuMemFreeAsync != 0 && d.cuMemPoolSetAttribute != 0 && d.cuMemPoolGetAttribute != 0 &&
		d.cuMemPoolTrimTo != 0 &&
		// nil-queue frees wait for the open queues through events
		d.cuEventCreate != 0 && d.cuEventRecord != 0 && d.cuEventDestroy != 0 && d.cuStreamWaitEvent != 0
}

// memPool is a device's stream-ordered pool: a pool of ompalloc's own
// (cuMemPoolCreate), not the device's default pool. The default pool is the
// one every cudaMallocAsync of the process (PyTorch's, CuPy's, a cgo
// library's) draws from: trimming it (TrimPool) or changing its release
// threshold (SetPoolLimit) here would take cached memory from those
// libraries or change how much they cache, and it cannot be destroyed at
// Close. A pool of our own is trimmed, bounded and destroyed alone.
//
// Driver calls per operation, each inside one push/pop of the context (2
// calls): Alloc on a queue 2 (cuMemAllocFromPoolAsync, and
// cuMemPoolGetAttribute of the reserved bytes after it, which tells a hit
// from a miss: see Reuse), Alloc without one 3 (and cuStreamSynchronize of
// the pool's allocation stream, so that the memory is usable by anything
// on return); 1 more for the reserved bytes before the allocation when the
// figure of the last one cannot be trusted (a release threshold is set, or
// a reading failed); Free on a queue 1
// (cuMemFreeAsync); Free without a queue 1 when no queue is open, else
// 1 + 2 per open queue (cuEventRecord of the queue's cached event,
// cuStreamWaitEvent of a free stream of the pool's, which the host never
// waits for) + a cuStreamQuery per free stream looked at for an idle one.
type memPool struct {
	d     *device
	pool  uintptr // CUmemoryPool
	alloc uintptr // stream of nil-queue allocations, and of nil-queue frees that wait for no queue

	// Streams of frees that wait for queues' events (a nil-queue free with
	// several busy queues, a free of a block other queues recorded): an
	// idle one is taken, else a new one while fewer than maxFreeStreams,
	// else the next in turn, so that a free waiting for a queue's long work
	// does not hold back the frees behind it that wait for other queues.
	fmu   sync.Mutex
	frees []uintptr
	next  int

	// What Reuse reports. The driver does not say whether an allocation
	// reused memory, but the pool's reserved bytes
	// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) grow only when it reserves
	// more for an allocation: an allocation after which they exceed what
	// they were before it is a miss, any other a hit. Nothing else
	// allocates from this pool (it is ompalloc's own), so the reserved
	// bytes before an allocation are those after the last one or after the
	// last Trim, unless the driver released memory meanwhile at a
	// synchronization, which it does only above the release threshold:
	// with a threshold set (SetPoolLimit) they are read before each
	// allocation. amu orders the readings with the allocation between
	// them. A trim runs outside amu (it may take long, and allocations go
	// on meanwhile): an allocation whose readings a trim ran between counts
	// as a miss, as the trim could hide its growth. A release at another
	// thread's synchronization between the two readings (a limit set) can
	// still make a miss count as a hit.
	amu        sync.Mutex
	last       uint64           // under amu: the reserved bytes last read
	lastOK     bool             // under amu: last is the figure now, unless released at a synchronization
	threshold  bool             // under amu: a release threshold below "keep everything" is set
	trims      [2]atomic.Uint64 // trims started, trims done
	hits, miss atomic.Uint64
	reserved   atomic.Uint64 // the last reading, for Reuse
}

// maxFreeStreams bounds the pool's free streams.
const maxFreeStreams = 4

var _ plugin.MemPooler = (*device)(nil)

// MemPool returns the device's stream-ordered pool, made at the first call
// on the open device that succeeds, or nil when the device reports no
// memory-pool support (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 0: an
// older driver or GPU), the driver lacks the calls, or making the pool
// failed: target then keeps its own size-class cache, and may ask again
// (a failed cuMemPoolCreate is tried again at the next call, so that a
// transient failure does not keep the device off its pool for good). Once
// made, the pool is answered without a driver call.
func (d *device) MemPool() plugin.MemPool {
	if mp := d.mp.Load(); mp != nil {
		return mp
	}
	if !d.poolsSupported || d.state.Load() != opened || d.closed.Load() {
		return nil
	}
	d.mpMu.Lock()
	defer d.mpMu.Unlock()
	if mp := d.mp.Load(); mp != nil {
		return mp
	}
	if d.mpClosed {
		return nil
	}
	mp, err := d.newMemPool()
	if err != nil {
		return nil
	}
	d.mp.Store(mp)
	// The peers PeerAccess connected before the pool existed get access
	// to it now (PeerAccess grants it to a pool made before).
	d.pmu.Lock()
	var peers []*device
	for o, st := range d.peers {
		if st == peerYes {
			peers = append(peers, o)
		}
	}
	d.pmu.Unlock()
	for _, o := range peers {
		_ = mp.grant(o)
	}
	return mp
}

func (d *device) newMemPool() (*memPool, error) {
	drv := d.drv
	mp := &memPool{d: d}
	props := cuMemPoolProps{allocType: cuMemAllocationTypePinned, locType: cuMemLocationTypeDevice, locID: d.dev}
	err := d.inCtx(func() error {
		if err := drv.check("cuMemPoolCreate", call(drv.cuMemPoolCreate, uintptr(unsafe.Pointer(&mp.pool)), uintptr(unsafe.Pointer(&props)))); err != nil {
			return err
		}
		// The default threshold is 0: "the allocator will try to release
		// memory back to the OS on the next call to stream, event or
		// context synchronize", which would undo the caching at every
		// nil-queue allocation. target sets the limit's threshold later.
		keep := ^uint64(0)
		if err := drv.check("cuMemPoolSetAttribute", call(drv.cuMemPoolSetAttribute, mp.pool, cuMempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&keep)))); err != nil {
			return err
		}
		// No internal dependencies (on by default). The Programming Guide:
		// "Failing to allocate and map more physical memory from the OS,
		// the driver will look for memory whose availability depends on
		// another stream's pending progress. If such memory is found, the
		// driver will insert the required dependency into the allocating
		// stream and reuse the memory." A nil-queue Alloc synchronizes its
		// stream before returning: with such a dependency the host would
		// wait for another queue's work, however long. Without it the
		// allocation fails (CUDA_ERROR_OUT_OF_MEMORY) and target trims and
		// retries once; "Internal dependency insertion ... can serialize
		// work in unexpected and potentially non-deterministic ways".
		off := int32(0)
		if err := drv.check("cuMemPoolSetAttribute", call(drv.cuMemPoolSetAttribute, mp.pool, cuMempoolAttrReuseAllowInternalDependencies, uintptr(unsafe.Pointer(&off)))); err != nil {
			return err
		}
		if err := drv.check("cuStreamCreate", call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&mp.alloc)), cuStreamNonBlocking)); err != nil {
			return err
		}
		var fs uintptr
		if err := drv.check("cuStreamCreate", call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&fs)), cuStreamNonBlocking)); err != nil {
			return err
		}
		mp.frees = append(mp.frees, fs)
		return nil
	})
	if err != nil {
		_ = mp.destroy()
		return nil, fmt.Errorf("%v: memory pool: %w", d, err)
	}
	return mp, nil
}

// destroy waits for the pool's streams, destroys them and the pool. The
// blocks still handed out are released with the context.
func (mp *memPool) destroy() error {
	drv := mp.d.drv
	return mp.d.inOpenCtx(func() error {
		var errs []error
		mp.fmu.Lock()
		streams := append([]uintptr{mp.alloc}, mp.frees...)
		mp.frees = nil
		mp.fmu.Unlock()
		for _, s := range streams {
			if s != 0 {
				errs = append(errs, drv.check("cuStreamSynchronize", call(drv.cuStreamSynchronize, s)),
					drv.check("cuStreamDestroy", call(drv.cuStreamDestroy, s)))
			}
		}
		if mp.pool != 0 {
			errs = append(errs, drv.check("cuMemPoolDestroy", call(drv.cuMemPoolDestroy, mp.pool)))
		}
		return errors.Join(errs...)
	})
}

// queueStream is the stream of q, a queue of mp's device.
func (mp *memPool) queueStream(q plugin.QueueImpl, what string) (*Queue, uintptr, error) {
	cq, s, err := stream(q, what)
	if err != nil {
		return nil, 0, err
	}
	if cq.d != mp.d {
		return nil, 0, fmt.Errorf("%v: %s on a queue of %v: %w", mp.d, what, cq.d, sentinel.ErrInvalidArgument)
	}
	return cq, s, nil
}

// Alloc is cuMemAllocFromPoolAsync on q's stream; without q on the pool's
// allocation stream, synchronized before returning. The driver may reuse a
// block freed on a busy stream by making ours wait for it
// (CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, on by default): the
// synchronization then waits for that work, which keeps the rule.
func (mp *memPool) Alloc(n uintptr, q plugin.QueueImpl) (uintptr, error) {
	if n == 0 {
		return 0, fmt.Errorf("%v: pool alloc of 0 bytes: %w", mp.d, sentinel.ErrInvalidArgument)
	}
	s := mp.alloc
	if q != nil {
		var err error
		if _, s, err = mp.queueStream(q, "pool alloc"); err != nil {
			return 0, err
		}
	}
	drv := mp.d.drv
	var p uintptr
	err := mp.d.inCtx(func() error {
		if err := mp.allocCounted(&p, n, s); err != nil {
			return err
		}
		if q != nil {
			return nil
		}
		if err := drv.check("cuStreamSynchronize", call(drv.cuStreamSynchronize, s)); err != nil {
			_ = call(drv.cuMemFreeAsync, p, s)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, &plugin.OpError{Dev: mp.d.String(), Op: fmt.Sprintf("pool alloc of %d bytes", n), Err: err}
	}
	return p, nil
}

// allocCounted is cuMemAllocFromPoolAsync on s, counted as a hit or a miss
// (see memPool.amu). Called in the context.
func (mp *memPool) allocCounted(p *uintptr, n, s uintptr) error {
	drv := mp.d.drv
	mp.amu.Lock()
	defer mp.amu.Unlock()
	done := mp.trims[1].Load()
	started := mp.trims[0].Load()
	before, known := mp.last, mp.lastOK && !mp.threshold
	if !known {
		before, known = mp.readReserved()
	}
	if err := drv.check("cuMemAllocFromPoolAsync", call(drv.cuMemAllocFromPoolAsync, uintptr(unsafe.Pointer(p)), n, mp.pool, s)); err != nil {
		return err
	}
	after, ok := mp.readReserved()
	mp.last, mp.lastOK = after, ok
	if started != done || mp.trims[0].Load() != started {
		known = false // a trim ran between the readings
	}
	if known && ok && after <= before {
		mp.hits.Add(1)
	} else {
		mp.miss.Add(1) // grown, or unknown: never claimed as served from the cache
	}
	return nil
}

// readReserved reads CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT (in the
// context), keeping it for Reuse.
func (mp *memPool) readReserved() (uint64, bool) {
	var r uint64
	if call(mp.d.drv.cuMemPoolGetAttribute, mp.pool, cuMempoolAttrReservedMemCurrent, uintptr(unsafe.Pointer(&r))) != cudaSuccess {
		return 0, false
	}
	mp.reserved.Store(r)
	return r, true
}

// Reuse reports the hits, the misses and the reserved bytes last read.
func (mp *memPool) Reuse() (hits, misses, reserved uint64) {
	return mp.hits.Load(), mp.miss.Load(), mp.reserved.Load()
}

// Free is cuMemFreeAsync on q's stream. Without q: on the allocation stream
// when no queue is open, else on a free stream (freeStream) after it waits
// for an event recorded on each queue of after.
func (mp *memPool) Free(p uintptr, q plugin.QueueImpl, after []plugin.QueueImpl) error {
	drv := mp.d.drv
	s := mp.alloc
	var waits []*Queue
	switch {
	case q != nil:
		var err error
		if _, s, err = mp.queueStream(q, "pool free"); err != nil {
			return err
		}
	case len(after) > 0:
		s = 0 // a free stream, taken in the context below
		for _, a := range after {
			cq, _, err := mp.queueStream(a, "pool free")
			if err != nil {
				return err
			}
			waits = append(waits, cq)
		}
	}
	err := mp.d.inCtx(func() error {
		if s == 0 {
			var err error
			if s, err = mp.freeStream(); err != nil {
				return err
			}
		}
		for _, cq := range waits {
			ev, qs, err := cq.poolEvent()
			if err != nil {
				return err
			}
			if err := drv.check("cuEventRecord", call(drv.cuEventRecord, ev, qs)); err != nil {
				return err
			}
			if err := drv.check("cuStreamWaitEvent", call(drv.cuStreamWaitEvent, s, ev, 0)); err != nil {
				return err
			}
		}
		return drv.check("cuMemFreeAsync", call(drv.cuMemFreeAsync, p, s))
	})
	if err != nil {
		return &plugin.OpError{Dev: mp.d.String(), Op: fmt.Sprintf("pool free of %#x", p), Err: err}
	}
	return nil
}

// freeStream picks the stream of a free that waits for events: an idle free
// stream of the pool's (cuStreamQuery), else a new one while there are
// fewer than maxFreeStreams, else the next in turn. Called in the context.
func (mp *memPool) freeStream() (uintptr, error) {
	drv := mp.d.drv
	mp.fmu.Lock()
	defer mp.fmu.Unlock()
	for _, s := range mp.frees {
		if call(drv.cuStreamQuery, s) == cudaSuccess {
			return s, nil
		}
	}
	if len(mp.frees) < maxFreeStreams {
		var s uintptr
		err := drv.check("cuStreamCreate", call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking))
		if err == nil {
			mp.frees = append(mp.frees, s)
			return s, nil
		}
		if len(mp.frees) == 0 {
			return 0, err
		}
	}
	if len(mp.frees) == 0 {
		return 0, fmt.Errorf("%v: memory pool: %w", mp.d, ErrClosed)
	}
	s := mp.frees[mp.next%len(mp.frees)]
	mp.next++
	return s, nil
}

// Stats reads CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and USED_MEM_CURRENT.
func (mp *memPool) Stats() (reserved, used uint64, err error) {
	drv := mp.d.drv
	err = mp.d.inCtx(func() error {
		if err := drv.check("cuMemPoolGetAttribute", call(drv.cuMemPoolGetAttribute, mp.pool, cuMempoolAttrReservedMemCurrent, uintptr(unsafe.Pointer(&reserved)))); err != nil {
			return err
		}
		return drv.check("cuMemPoolGetAttribute", call(drv.cuMemPoolGetAttribute, mp.pool, cuMempoolAttrUsedMemCurrent, uintptr(unsafe.Pointer(&used))))
	})
	if err == nil {
		mp.reserved.Store(reserved)
	}
	return reserved, used, err
}

// SetReleaseThreshold sets CU_MEMPOOL_ATTR_RELEASE_THRESHOLD.
func (mp *memPool) SetReleaseThreshold(n uint64) error {
	mp.amu.Lock()
	defer mp.amu.Unlock()
	mp.threshold = n != ^uint64(0)
	return mp.d.withCtx("cuMemPoolSetAttribute", func() result {
		return call(mp.d.drv.cuMemPoolSetAttribute, mp.pool, cuMempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&n)))
	})
}

// Trim is cuMemPoolTrimTo, after synchronizing the allocation stream and,
// when its work is done already, the free stream: "Allocations that have
// been asynchronously freed but whose completion has not been observed on
// the host (eg. by a synchronize) can count as outstanding". The host never
// waits for the queues a nil-queue free waits for.
func (mp *memPool) Trim(keep uintptr) error {
	drv := mp.d.drv
	return mp.d.inCtx(func() error {
		if err := drv.check("cuStreamSynchronize", call(drv.cuStreamSynchronize, mp.alloc)); err != nil {
			return err
		}
		mp.fmu.Lock()
		frees := slices.Clone(mp.frees)
		mp.fmu.Unlock()
		for _, fs := range frees {
			if call(drv.cuStreamQuery, fs) == cudaSuccess {
				if err := drv.check("cuStreamSynchronize", call(drv.cuStreamSynchronize, fs)); err != nil {
					return err
				}
			}
		}
		mp.trims[0].Add(1)
		err := drv.check("cuMemPoolTrimTo", call(drv.cuMemPoolTrimTo, mp.pool, keep))
		mp.amu.Lock()
		mp.last, mp.lastOK = mp.readReserved()
		mp.trims[1].Add(1)
		mp.amu.Unlock()
		return err
	})
}

// poolEvent returns the queue's event for nil-queue pool frees (made at
// first use, in the caller's context section) and its stream. Recording it
// again for a later free is safe: cuStreamWaitEvent waits for the record
// current at its call, and a later record covers more work.
func (q *Queue) poolEvent() (ev, s uintptr, err error) {
	q.evMu.Lock()
	defer q.evMu.Unlock()
	if s, err = q.live("pool free"); err != nil {
		return 0, 0, err
	}
	if q.poolEv == 0 {
		drv := q.d.drv
		if err := drv.check("cuEventCreate", call(drv.cuEventCreate, uintptr(unsafe.Pointer(&q.poolEv)), cuEventDisableTiming)); err != nil {
			return 0, 0, err
		}
	}
	return q.poolEv, s, nil
}

// grant gives device o access to the pool's blocks (cuMemPoolSetAccess,
// read and write), for PeerAccess. The Programming Guide: "memory pool
// allocation accessibility does not follow cudaDeviceEnablePeerAccess or
// cuCtxEnablePeerAccess. ... By default, allocations are accessible only
// from the device where the allocations are located." Without the call in
// the driver nothing is granted: peer copies of pool blocks then go
// through cuMemcpyPeerAsync's staged path.
func (mp *memPool) grant(o *device) error {
	drv := mp.d.drv
	if drv.cuMemPoolSetAccess == 0 {
		return nil
	}
	desc := cuMemAccessDesc{locType: cuMemLocationTypeDevice, locID: int32(o.dev), flags: cuMemAccessFlagsProtReadWrite}
	err := mp.d.withCtx("cuMemPoolSetAccess", func() result {
		return call(drv.cuMemPoolSetAccess, mp.pool, uintptr(unsafe.Pointer(&desc)), 1)
	})
	if err != nil {
		return fmt.Errorf("%v: give %v access to the memory pool: %w", mp.d, o, err)
	}
	return nil
}

// closeMemPool destroys the pool at device close (Close holds no other
// device state by then); no pool is made afterwards.
func (d *device) closeMemPool() error {
	d.mpMu.Lock()
	d.mpClosed = true
	mp := d.mp.Swap(nil)
	d.mpMu.Unlock()
	if mp == nil {
		return nil
	}
	return mp.destroy()
}

// mpState is the device's pool, made at the first MemPool call that
// succeeds (mempool.go).
type mpState struct {
	poolsSupported bool // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, with every symbol bound
	mpMu           sync.Mutex
	mpClosed       bool // under mpMu: Close destroyed the pool or made none
	mp             atomic.Pointer[memPool]
}
