package target

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Errors of the generic layer; test with errors.Is.
var (
	// ErrBadDevice: a device number outside 0..NumDevices().
	ErrBadDevice = device.ErrBadDevice
	// ErrInvalidArgument: a nil pointer, a zero size or an unknown kind
	// (the same variable as alloc.ErrInvalidArgument).
	ErrInvalidArgument = sentinel.ErrInvalidArgument
	// ErrShutdown: the device was closed by Shutdown.
	ErrShutdown = device.ErrShutdown
	// ErrUnavailable: the device is listed but could not be opened (a CUDA
	// GPU in compute mode PROHIBITED, or out of memory for its context);
	// the error also carries the driver's reason. Other devices work.
	ErrUnavailable = device.ErrUnavailable
)

// Device is one device: the public layer over the device core
// (internal/device: the vendor's Impl, the pinned registry, discovery,
// Shutdown) with everything generic that users call, written once —
// argument checks, transfers, the staging pool, queues.
type Device struct {
	ID int // OpenMP device number

	core *device.Device
	// The core's, copied here (they never change) for the paths that read
	// them on every call.
	impl   plugin.Impl
	plugin string
	host   bool
	reg    *pinreg.Registry

	pool    *stagingPool
	devpool *devPool // cached device memory (devpool.go)
	mem     *devMem  // the books of device memory handed out (memstats.go)
	mapMode pinreg.MapMode

	amu    sync.Mutex
	allocs map[uintptr]MemKind // what Alloc returned and Free has not taken back

	qmu    sync.Mutex
	queues map[*Queue]struct{} // open queues; nil once closed
}

// newLayer makes the public layer of cd (wrap), with the staging and
// lock-mapped settings the environment gives cd's discovery.
func newLayer(cd *device.Device) device.Layer {
	info := infoOf(device.Current())
	cfg, mode := info.cfg, info.mode
	impl := cd.Impl()
	mem := new(devMem)
	return (*layer)(&Device{
		ID: cd.ID, core: cd, impl: impl, plugin: cd.Plugin(), host: cd.IsHost(),
		reg:     cd.Registry(),
		pool:    newStagingPool(impl, cfg),
		devpool: newDevPool(mem),
		mem:     mem,
		mapMode: mode,
		allocs:  map[uintptr]MemKind{},
		queues:  map[*Queue]struct{}{},
	})
}

// Info describes the device. It is read from the plugin once.
func (d *Device) Info() Info { return d.core.Info() }

// IsHost reports whether d is the host (the initial device).
func (d *Device) IsHost() bool { return d.host }

// Plugin is the name of the plugin that drives d: "host", "cuda", "amdgpu".
func (d *Device) Plugin() string { return d.plugin }

// Registry is a read-only view of the device's pinned registry: every host
// range locked for it or allocated by it as host-pinned memory.
func (d *Device) Registry() Registry { return Registry{d.reg} }

// StagingStats reports what the device's staging pool did.
func (d *Device) StagingStats() StagingStats { return d.pool.snapshot() }

// StagingConfig returns the device's staging configuration.
func (d *Device) StagingConfig() StagingConfig { return d.pool.config() }

// SetStagingConfig changes the device's staging configuration; free buffers
// that no longer fit are freed.
func (d *Device) SetStagingConfig(c StagingConfig) { d.pool.setConfig(c) }

func (d *Device) String() string {
	return fmt.Sprintf("device %d (%s %s)", d.ID, d.plugin, d.Info().Name)
}

func (d *Device) usable() error { return d.core.Usable() }

// Open opens the device now rather than at its first use, and reports why
// it cannot be used: nil, or an error matching ErrUnavailable (with the
// driver's reason) or ErrShutdown. Discovery opens nothing: a device that
// cannot be opened keeps its number, answers Info, and fails each
// operation with that same error, while the other devices work.
func (d *Device) Open() error { return d.usable() }

func checkKind(kind MemKind) error {
	switch kind {
	case MemDevice, MemHost, MemShared:
		return nil
	}
	return fmt.Errorf("memory kind %d: %w", int(kind), ErrInvalidArgument)
}

// Alloc allocates n bytes of the given kind on d. Host-pinned memory is
// registered in the device's registry, so transfers from it take the pinned
// path and locks inside it only count references.
func (d *Device) Alloc(kind MemKind, n uintptr) (uintptr, error) {
	if err := d.usable(); err != nil {
		return 0, err
	}
	if err := checkKind(kind); err != nil {
		return 0, fmt.Errorf("device %d: alloc: %w", d.ID, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("device %d: alloc of 0 bytes of %s memory: %w", d.ID, kind, ErrInvalidArgument)
	}
	p, err := d.impl.Alloc(kind, n)
	if err != nil {
		return 0, fmt.Errorf("device %d: alloc of %d bytes of %s memory: %w", d.ID, n, kind, plugin.Cause(err))
	}
	if kind == MemHost {
		if err := d.reg.Register(p, d.devicePointer(p, n), n); err != nil {
			_ = d.impl.Free(kind, p)
			return 0, fmt.Errorf("device %d: register %d bytes of host memory at %#x: %w", d.ID, n, p, err)
		}
	}
	d.amu.Lock()
	d.allocs[p] = kind
	d.amu.Unlock()
	if kind == MemDevice {
		d.memAlloc(p, n, pathDirect)
	}
	return p, nil
}

// Kind reports the kind of memory Alloc returned at p, if it did and the
// memory was not freed.
func (d *Device) Kind(p uintptr) (MemKind, bool) {
	d.amu.Lock()
	defer d.amu.Unlock()
	k, ok := d.allocs[p]
	return k, ok
}

// devicePointer returns the address the device uses for host-pinned memory
// it allocated: the driver knows it as pinned (ExternalLock), and the host
// address serves where it does not say otherwise.
func (d *Device) devicePointer(p, n uintptr) uintptr {
	ext, ok, err := d.impl.ExternalLock(p, n)
	if err != nil || !ok || ext.Dev == 0 || p < ext.Host {
		return p
	}
	return ext.Dev + (p - ext.Host)
}

// Free releases memory Alloc returned with the same kind. Host-pinned
// memory still locked by someone (LockMem inside it) is not freed.
func (d *Device) Free(kind MemKind, p uintptr) error {
	if err := d.usable(); err != nil {
		return err
	}
	if err := checkKind(kind); err != nil {
		return fmt.Errorf("device %d: free: %w", d.ID, err)
	}
	if p == 0 {
		return fmt.Errorf("device %d: free of a nil %s pointer: %w", d.ID, kind, ErrInvalidArgument)
	}
	size, allocated, err := d.free(kind, p)
	if err == nil && kind == MemDevice && recording.Load() {
		d.record(p, size, pathDirect, false, allocated) // outside amu: it asks the pool
	}
	return err
}

// free is Free under amu; for device memory it returns the block's size
// and the device's allocated bytes after it.
func (d *Device) free(kind MemKind, p uintptr) (size uintptr, allocated uint64, err error) {
	d.amu.Lock()
	defer d.amu.Unlock()
	switch k, ok := d.allocs[p]; {
	case !ok && kind == MemDevice && d.mem.wasFreed(p, pathDirect):
		return 0, 0, doubleFree(d.ID, p, "device memory")
	case !ok:
		return 0, 0, fmt.Errorf("device %d: free of %s memory at %#x: %w: not allocated by this device", d.ID, kind, p, ErrInvalidArgument)
	case k != kind:
		return 0, 0, fmt.Errorf("device %d: free of %s memory at %#x: %w: it was allocated as %s memory", d.ID, kind, p, ErrInvalidArgument, k)
	}
	if kind == MemHost {
		if err := d.reg.Unregister(p); err != nil {
			return 0, 0, fmt.Errorf("device %d: free of host memory at %#x: %w", d.ID, p, err)
		}
	}
	if err := d.impl.Free(kind, p); err != nil {
		return 0, 0, fmt.Errorf("device %d: free of %s memory at %#x: %w", d.ID, kind, p, plugin.Cause(err))
	}
	delete(d.allocs, p)
	if kind == MemDevice {
		// Under amu: the driver may hand p out again once amu is let go.
		var ok bool
		if size, allocated, ok = d.mem.free(p, pathDirect); ok {
			memsample.Forget(p)
		}
	}
	return size, allocated, nil
}

// LockMem page-locks [p, p+n) for d (llvm_omp_target_lock_mem) and returns
// the address the device uses for p. A range inside one already locked only
// adds a reference.
func (d *Device) LockMem(p, n uintptr) (uintptr, error) {
	if err := d.usable(); err != nil {
		return 0, err
	}
	if p == 0 || n == 0 {
		return 0, fmt.Errorf("device %d: lock %#x+%d: %w", d.ID, p, n, ErrInvalidArgument)
	}
	dev, err := d.reg.Lock(p, n)
	if err != nil {
		return 0, d.lockErr(p, n, err)
	}
	return dev, nil
}

// lockErr is the error of a lock the registry refused. When the driver
// refused it, the message says the device, the range and the driver's
// call once (not the registry's and the plugin's words around it); the
// whole chain stays for errors.Is and As.
func (d *Device) lockErr(p, n uintptr, err error) error {
	var ce plugin.CallError
	if !errors.As(err, &ce) {
		return fmt.Errorf("device %d: %w", d.ID, err)
	}
	return &worded{msg: fmt.Sprintf("device %d: lock %#x+%d: %v", d.ID, p, n, ce), err: err}
}

// worded is an error with target's wording over another error's chain.
type worded struct {
	msg string
	err error
}

func (e *worded) Error() string { return e.msg }
func (e *worded) Unwrap() error { return e.err }

// UnlockMem drops the reference LockMem took on the locked range holding p;
// the last one unlocks it.
func (d *Device) UnlockMem(p uintptr) error {
	if err := d.usable(); err != nil {
		return err
	}
	if p == 0 {
		return fmt.Errorf("device %d: unlock of a nil pointer: %w", d.ID, ErrInvalidArgument)
	}
	if err := d.reg.Unlock(p); err != nil {
		return fmt.Errorf("device %d: %w", d.ID, err)
	}
	return nil
}
