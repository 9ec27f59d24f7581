package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// device is one CUDA device. Discovery only asks the driver about it; its
// primary context is retained when the device is first used (Open) and
// released at Close, so a process that uses one GPU takes no memory on the
// others, and a GPU whose context cannot be made (compute mode PROHIBITED,
// out of memory) fails alone.
type device struct {
	drv    *driver
	ord    int
	dev    int32   // CUdevice
	ctx    uintptr // CUcontext: the primary context, retained from Open to Close
	info   plugin.Info
	closed atomic.Bool

	openMu  sync.Mutex
	state   atomic.Int32 // notOpened, opened or failed; ctx and openErr are set before it changes
	openErr error

	mu     sync.Mutex
	allocs map[uintptr]plugin.MemKind

	smu         sync.Mutex
	syncIdle    sync.Cond // on smu: syncBusy fell to 0
	syncStreams []uintptr // idle streams of synchronous copies
	syncBusy    int       // synchronous copies holding a stream
	syncClosed  bool      // Close took the streams: no copy may take or put one

	pmu   sync.Mutex
	peers map[*device]peerState // what PeerAccess found, per other device

	mpState // the stream-ordered pool (mempool.go)

	evFlags uintptr // CU_EVENT_BLOCKING_SYNC or 0, from EnvSched at Open (sched.go)
}

// keepSyncStreams bounds the idle streams a device keeps for synchronous
// copies; more concurrent copies make streams of their own and destroy them.
const keepSyncStreams = 4

const (
	notOpened int32 = iota
	opened
	failed
)

// discoverDevice describes CUDA device ord without creating a context on
// it. A device the driver cannot describe is returned failed, with the
// reason: it keeps its ordinal and every use reports the error.
func discoverDevice(drv *driver, ord int, version string) *device {
	d := &device{drv: drv, ord: ord, allocs: map[uintptr]plugin.MemKind{}}
	d.syncIdle.L = &d.smu
	d.info = plugin.Info{Vendor: "nvidia", Driver: drv.lib.Path, Version: version, NUMANode: -1}
	if err := d.describe(); err != nil {
		d.openErr = fmt.Errorf("%v: %w", d, err)
		d.state.Store(failed)
	}
	return d
}

func (d *device) describe() error {
	drv := d.drv
	if err := drv.check("cuDeviceGet", call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(d.ord))); err != nil {
		return err
	}
	var name [256]byte
	if err := drv.check("cuDeviceGetName", call(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev))); err != nil {
		return err
	}
	var mem uint64 // size_t
	if err := drv.check("cuDeviceTotalMem", call(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&mem)), uintptr(d.dev))); err != nil {
		return err
	}
	var major, minor int32
	if err := drv.check("cuDeviceGetAttribute", call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&major)), cuDeviceAttributeComputeCapabilityMajor, uintptr(d.dev))); err != nil {
		return err
	}
	if err := drv.check("cuDeviceGetAttribute", call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&minor)), cuDeviceAttributeComputeCapabilityMinor, uintptr(d.dev))); err != nil {
		return err
	}
	n := 0
	for n < len(name) && name[n] != 0 {
		n++
	}
	d.info.Name = string(name[:n])
	d.info.Memory = mem
	d.info.Capability = fmt.Sprintf("%d.%d", major, minor)
	d.info.NUMANode = d.pciNode()
	// An older driver does not know attribute 115 (CUDA_ERROR_INVALID_VALUE):
	// no pool support, as when it says 0.
	var pools int32
	if drv.hasPools() && call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&pools)), cuDeviceAttributeMemoryPoolsSupported, uintptr(d.dev)) == cudaSuccess {
		d.poolsSupported = pools != 0
	}
	return nil
}

// sysRoot is where sysfs is found; tests point it at a fixture tree.
var sysRoot = "/"

// pciNode is the NUMA node of the GPU's PCI slot, -1 when the driver lacks
// cuDeviceGetPCIBusId, refuses it, or the kernel does not know the node.
// It is only a placement hint, so no answer is no failure.
func (d *device) pciNode() int {
	if d.drv.cuDeviceGetPCIBusId == 0 {
		return -1
	}
	var id [32]byte // the driver needs 13 bytes ("0000:3B:00.0" and NUL)
	if call(d.drv.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&id[0])), uintptr(len(id)), uintptr(d.dev)) != 0 {
		return -1
	}
	n := bytes.IndexByte(id[:], 0)
	if n < 0 {
		n = len(id)
	}
	node, _ := numa.PCINode(sysRoot, string(id[:n])) // -1 when not ok
	return node
}

// Open retains the device's primary context, once. A failure is kept: the
// device stays unusable, with the driver's reason
// (cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN for a GPU in compute mode
// PROHIBITED).
func (d *device) Open() error {
	switch d.state.Load() {
	case opened:
		return nil
	case failed:
		return d.openErr
	}
	d.openMu.Lock()
	defer d.openMu.Unlock()
	switch d.state.Load() {
	case opened:
		return nil
	case failed:
		return d.openErr
	}
	if d.closed.Load() {
		return fmt.Errorf("%v: open: %w", d, ErrClosed)
	}
	d.setSched() // before the retain activates the context
	var ctx uintptr
	if err := d.drv.check("cuDevicePrimaryCtxRetain", call(d.drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(d.dev))); err != nil {
		d.openErr = fmt.Errorf("%v: open: %w", d, err)
		d.state.Store(failed)
		return d.openErr
	}
	d.ctx = ctx
	d.state.Store(opened)
	return nil
}

func (d *device) Info() plugin.Info { return d.info }

func (d *device) String() string { return fmt.Sprintf("CUDA device %d", d.ord) }

// withCtx runs f on a locked OS thread whose current context is the
// device's, and names f's failure after call. The driver's current context is
// per OS thread, so the thread must not change between making it current and
// f; the thread's own context stack is left as it was (inOpenCtx).
func (d *device) withCtx(name string, f func() result) error {
	if d.closed.Load() {
		return fmt.Errorf("%s: %v: %w", name, d, ErrClosed)
	}
	return d.inCtx(func() error { return d.drv.check(name, f()) })
}

// inCtx is withCtx for several calls in one section: f names its own errors.
func (d *device) inCtx(f func() error) error {
	if d.closed.Load() {
		return fmt.Errorf("%v: %w", d, ErrClosed)
	}
	if err := d.Open(); err != nil {
		return err
	}
	return d.inOpenCtx(f)
}

// inOpenCtx runs f with d's context current on a locked OS thread; the
// context must be retained (by the open device, or by a registration). It
// borrows the thread: cuCtxPushCurrent_v2 before f, cuCtxPopCurrent_v2
// after, so a caller that locked its thread with a context of its own (a cgo
// library, the CUDA runtime API) finds that context current again, where
// cuCtxSetCurrent would have replaced the top of its stack for good.
//
// The result is f's alone: a failed pop after f does not undo what f did in
// the driver (a registration made, an unregistration done), so reporting
// the pop as the call's failure would leave the plugin's books saying the
// opposite of the driver's (issue 27 item 5). The thread whose stack the
// driver would not pop keeps d's context on it: it is not handed back to
// other goroutines (the lock on it stays, and Go ends a thread whose
// goroutine exits locked to it), and the failure is a warning.
func (d *device) inOpenCtx(f func() error) error {
	runtime.LockOSThread()
	if err := d.drv.check("cuCtxPushCurrent", call(d.drv.cuCtxPushCurrent, d.ctx)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := f()
	var popped uintptr
	if perr := d.drv.check("cuCtxPopCurrent", call(d.drv.cuCtxPopCurrent, uintptr(unsafe.Pointer(&popped)))); perr != nil {
		warn.Emit(warn.Driver, "cuda", fmt.Sprintf("%v: %v: the call before it stands; this goroutine keeps its OS thread, "+
			"which ends with it", d, perr), perr)
		return err
	}
	runtime.UnlockOSThread()
	return err
}

// Alloc allocates n bytes: device memory (cuMemAlloc_v2), pinned host memory
// every context can use (cuMemHostAlloc, PORTABLE|DEVICEMAP), or managed
// memory (cuMemAllocManaged, ATTACH_GLOBAL).
func (d *device) Alloc(kind plugin.MemKind, n uintptr) (uintptr, error) {
	if n == 0 {
		return 0, d.opErr(sentinel.ErrInvalidArgument, "alloc of 0 bytes of %s memory", kind)
	}
	var p uintptr
	var err error
	switch kind {
	case plugin.MemDevice:
		err = d.withCtx("cuMemAlloc", func() result { return call(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), n) })
	case plugin.MemHost:
		err = d.withCtx("cuMemHostAlloc", func() result {
			return call(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), n, cuMemHostAllocPortable|cuMemHostAllocDeviceMap)
		})
	case plugin.MemShared:
		if d.drv.cuMemAllocManaged == 0 {
			return 0, d.opErr(fmt.Errorf("cuMemAllocManaged missing in %s: %w", d.drv.lib.Path, ErrNotSupported), "alloc of %d bytes of %s memory", n, kind)
		}
		err = d.withCtx("cuMemAllocManaged", func() result {
			return call(d.drv.cuMemAllocManaged, uintptr(unsafe.Pointer(&p)), n, cuMemAttachGlobal)
		})
	default:
		return 0, d.opErr(sentinel.ErrInvalidArgument, "alloc of %s memory", kind)
	}
	if err != nil {
		return 0, d.opErr(err, "alloc of %d bytes of %s memory", n, kind)
	}
	d.mu.Lock()
	d.allocs[p] = kind
	d.mu.Unlock()
	return p, nil
}

// Free releases memory Alloc returned with the same kind.
func (d *device) Free(kind plugin.MemKind, p uintptr) error {
	d.mu.Lock()
	k, ok := d.allocs[p]
	if ok && k == kind {
		delete(d.allocs, p)
	}
	d.mu.Unlock()
	if !ok || k != kind {
		return d.opErr(ErrNotAllocated, "free of %s memory at %#x", kind, p)
	}
	if err := d.free(kind, p); err != nil {
		// The driver still holds the block: keep the record so that a later
		// Free (or Close) can release it.
		d.mu.Lock()
		d.allocs[p] = kind
		d.mu.Unlock()
		return err
	}
	return nil
}

func (d *device) free(kind plugin.MemKind, p uintptr) error {
	if kind == plugin.MemHost {
		return d.withCtx("cuMemFreeHost", func() result { return call(d.drv.cuMemFreeHost, p) })
	}
	return d.withCtx("cuMemFree", func() result { return call(d.drv.cuMemFree, p) })
}

// Copy copies n bytes on q's stream (cuMemcpy*Async_v2): the host side must
// stay untouched until the queue reports the work done. With q nil the copy
// runs on a stream of the device's own, which Copy synchronizes: it is
// complete on return, so work issued afterwards on any stream sees it. The
// driver's "synchronous" cuMemcpy*_v2 calls would not do: they run on the
// legacy default stream, a device-to-device one returns before the copy is
// done and a host-to-device one from pageable memory before the DMA has
// landed (the driver API's "API synchronization behavior"), and the
// non-blocking streams of queues do not wait for the legacy stream. LLVM's
// plugin does the same.
//
// The arguments were checked by the generic layer (plugin.Impl.Copy's
// contract): n > 0, no nil pointer, no host-to-host copy, q this device's.
func (d *device) Copy(dst, src, n uintptr, dir plugin.Direction, q plugin.QueueImpl) error {
	var stream uintptr
	if q != nil {
		s, ok := q.(*Queue)
		if !ok {
			return d.opErr(fmt.Errorf("%w: a queue of another plugin (%T)", sentinel.ErrInvalidArgument, q), "copy %s of %d bytes from %#x to %#x", dir, n, src, dst)
		}
		// A destroyed stream's handle is 0, which the driver takes for the
		// legacy default stream (synchronizing with every other stream of
		// the context): never issue on it by mistake.
		if stream = s.handle(); stream == 0 {
			return d.opErr(fmt.Errorf("queue %w", ErrClosed), "copy %s of %d bytes from %#x to %#x", dir, n, src, dst)
		}
	}
	var fn uintptr
	var name string
	switch dir {
	case plugin.HostToDevice:
		fn, name = d.drv.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync"
	case plugin.DeviceToHost:
		fn, name = d.drv.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync"
	case plugin.DeviceToDevice:
		fn, name = d.drv.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync"
	default:
		return d.opErr(sentinel.ErrInvalidArgument, "copy in direction %s", dir)
	}
	enqueue := func(s uintptr) result { return call(fn, dst, src, n, s) }
	if dir != plugin.DeviceToDevice {
		host := src
		if dir == plugin.DeviceToHost {
			host = dst
		}
		if parts := d.drv.regs.Cut(host, n); parts != nil {
			// One copy per registration or pageable gap (regtab's Cut says
			// why).
			enqueue = func(s uintptr) result {
				for i, pc := range parts {
					off := pc.Host - host
					if r := call(fn, dst+off, src+off, pc.Size, s); r != cudaSuccess {
						if i > 0 {
							// The parts issued still read or write the host
							// memory: a failed copy must not leave them in
							// flight, the caller may free that memory now.
							_ = call(d.drv.cuStreamSynchronize, s)
						}
						return r
					}
				}
				return cudaSuccess
			}
		}
	}
	var err error
	if q == nil {
		err = d.syncCopy(name, enqueue)
	} else {
		err = d.withCtx(name, func() result { return enqueue(stream) })
	}
	if err != nil {
		return &plugin.OpError{Dev: d.String(), Op: fmt.Sprintf("copy %s of %d bytes from %#x to %#x", dir, n, src, dst), Err: err}
	}
	return nil
}

// syncCopy enqueues one copy (enqueue, given the stream) on a stream of the
// device's own and waits for it to complete, both with the device's context
// current on one locked thread.
func (d *device) syncCopy(name string, enqueue func(stream uintptr) result) error {
	s, err := d.takeSyncStream()
	if err != nil {
		return err
	}
	waited := false
	err = d.inCtx(func() error {
		if err := d.drv.check(name, enqueue(s)); err != nil {
			return err
		}
		waited = true
		return d.drv.check("cuStreamSynchronize", call(d.drv.cuStreamSynchronize, s))
	})
	// A stream whose work failed is not reused.
	d.putSyncStream(s, err == nil || !waited)
	return err
}

// takeSyncStream returns an idle stream of synchronous copies, creating one
// (non-blocking, like queues') when none is idle. Until putSyncStream the
// copy counts as in flight: Close waits for it before it destroys the
// streams and releases the context, so that no stream is put back (and
// leaked) after Close took them.
func (d *device) takeSyncStream() (uintptr, error) {
	d.smu.Lock()
	if d.syncClosed {
		d.smu.Unlock()
		return 0, fmt.Errorf("%v: %w", d, ErrClosed)
	}
	d.syncBusy++
	if k := len(d.syncStreams); k > 0 {
		s := d.syncStreams[k-1]
		d.syncStreams = d.syncStreams[:k-1]
		d.smu.Unlock()
		return s, nil
	}
	d.smu.Unlock()
	var s uintptr
	err := d.withCtx("cuStreamCreate", func() result {
		return call(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking)
	})
	if err != nil {
		d.syncDone()
		return 0, err
	}
	return s, nil
}

// putSyncStream ends a synchronous copy: s goes back to the idle streams
// when reuse allows and there is room, else it is destroyed.
func (d *device) putSyncStream(s uintptr, reuse bool) {
	d.smu.Lock()
	if reuse && len(d.syncStreams) < keepSyncStreams && !d.syncClosed {
		d.syncStreams = append(d.syncStreams, s)
		s = 0
	}
	d.smu.Unlock()
	if s != 0 {
		// The context is still retained: Close waits for this copy.
		_ = d.inOpenCtx(func() error {
			return d.drv.check("cuStreamDestroy", call(d.drv.cuStreamDestroy, s))
		})
	}
	d.syncDone()
}

func (d *device) syncDone() {
	d.smu.Lock()
	if d.syncBusy--; d.syncBusy == 0 {
		d.syncIdle.Broadcast()
	}
	d.smu.Unlock()
}

// SyncStreams is the number of idle streams the device keeps for
// synchronous copies (at most 4), for leak checks that count the driver's
// streams.
func (d *device) SyncStreams() int {
	d.smu.Lock()
	defer d.smu.Unlock()
	return len(d.syncStreams)
}

// destroySyncStreams stops synchronous copies (later ones fail with
// ErrClosed), waits for those in flight and destroys the idle streams.
func (d *device) destroySyncStreams() error {
	d.smu.Lock()
	d.syncClosed = true
	for d.syncBusy > 0 {
		d.syncIdle.Wait()
	}
	ss := d.syncStreams
	d.syncStreams = nil
	d.smu.Unlock()
	var errs []error
	for _, s := range ss {
		errs = append(errs, d.withCtx("cuStreamDestroy", func() result { return call(d.drv.cuStreamDestroy, s) }))
	}
	return errors.Join(errs...)
}

// NewQueue creates a non-blocking stream: it does not wait for, nor hold up,
// synchronous work on the legacy default stream.
func (d *device) NewQueue() (plugin.QueueImpl, error) {
	var s uintptr
	if err := d.withCtx("cuStreamCreate", func() result {
		return call(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking)
	}); err != nil {
		return nil, &plugin.OpError{Dev: d.String(), Op: "new queue", Err: err}
	}
	q := &Queue{d: d}
	q.stream.Store(uint64(s))
	return q, nil
}

// Close releases what the device holds: its locks, its allocations and its
// primary context. The device is unusable afterwards.
func (d *device) Close() error {
	if d.closed.Load() {
		return nil
	}
	d.openMu.Lock()
	if d.state.Load() != opened {
		// Never opened, or failed to: the device holds nothing.
		d.closed.Store(true)
		d.openMu.Unlock()
		return nil
	}
	d.openMu.Unlock()
	var errs []error
	errs = append(errs, d.closeMemPool(), d.destroySyncStreams())
	if err := d.drv.regs.ReleaseAll(d); err != nil {
		errs = append(errs, fmt.Errorf("%v: unlock at close: %w", d, err))
	}
	d.mu.Lock()
	allocs := d.allocs
	d.allocs = map[uintptr]plugin.MemKind{}
	d.mu.Unlock()
	for p, k := range allocs {
		errs = append(errs, d.free(k, p))
	}
	if d.closed.Swap(true) {
		return errors.Join(errs...)
	}
	errs = append(errs, d.drv.check("cuDevicePrimaryCtxRelease", call(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.dev))))
	return errors.Join(errs...)
}
