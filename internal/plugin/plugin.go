package plugin

import (
	"github.com/ompalloc/ompalloc/internal/pinreg"
)

// Impl is the thin per-vendor part of a device, as LLVM's GenericDeviceTy
// leaves to each plugin. Everything generic (numbering, argument checks, the
// pinned registry, staging buffers, queues' bookkeeping) lives in Device and is
// written once. All addresses are uintptr: none of this memory is Go memory.
//
// An Impl must be safe for concurrent use.
type Impl interface {
	pinreg.Locker

	// Info describes the device (name, vendor, memory, ...).
	Info() Info

	// Alloc allocates n bytes of the given kind; Free releases it.
	Alloc(kind MemKind, n uintptr) (uintptr, error)
	Free(kind MemKind, p uintptr) error

	// Copy copies n bytes in direction dir. With q == nil it is complete on
	// return, whatever the direction and whether the host side is pinned or
	// pageable: work issued afterwards on any queue of the device sees the
	// result (CUDA's "synchronous" cuMemcpy* calls do not promise that, so
	// the CUDA plugin copies on a stream of its own and synchronizes it).
	// Otherwise it is enqueued on q and may complete later. Host sides are
	// always host addresses, also when the range is locked: the plugin
	// translates to a device alias itself if its driver needs one (CUDA's
	// copy calls take host pointers; HSA's want the agent pointer).
	//
	// The generic layer (target) checks the arguments once, for every
	// vendor, and calls Copy only with n > 0, dst and src not nil and
	// neither range wrapping around the address space, dir HostToDevice,
	// DeviceToHost or DeviceToDevice (host-to-host copies are memmoves there
	// and never reach a vendor), and q nil or an open queue that this
	// device's NewQueue returned (target.Queue's device is checked and its
	// destruction is ordered after every copy issued on it). A vendor does
	// not check these again (LLVM's GenericDeviceTy/*Impl split); it only
	// reaches its own queue type from q, refusing any other with an error
	// rather than a panic.
	Copy(dst, src, n uintptr, dir Direction, q QueueImpl) error

	// NewQueue creates an in-order queue of asynchronous work.
	NewQueue() (QueueImpl, error)

	// Close releases everything the plugin holds for the device.
	Close() error
}

// Plugin is one vendor's driver: it loads lazily and enumerates devices.
type Plugin interface {
	// Name is a short vendor name: "host", "cuda", "amdgpu".
	Name() string
	// Init loads the driver and initialises it. A missing driver is an
	// ordinary result (an error that wraps loader.ErrNotFound), not a crash.
	Init() error
	// Status describes the driver for `ompalloc info`: library path or why
	// none, driver version, init result by the driver's own name.
	Status() Status
	// Devices returns the initialised devices, in the driver's order.
	Devices() []Impl
}

// Status is what a plugin reports about its driver.
type Status struct {
	Plugin  string // "cuda"
	Library string // path loaded, "" when none
	Version string // driver version, "" when unknown
	Init    string // "CUDA_SUCCESS", "CUDA_ERROR_NO_DEVICE", "not found: ...", ...
	Err     error  // nil when the driver is usable
	Advice  string // with Err: what it means on this machine and what to do, in words
}

// QueueImpl is a vendor queue (a CUDA stream, an HSA signal chain).
type QueueImpl interface {
	// Synchronize waits until all work on the queue has completed.
	Synchronize() error
	// Query reports whether all work enqueued so far has completed.
	Query() (done bool, err error)
	// Destroy releases the queue. Work still in flight is waited for; when
	// that wait fails the queue is destroyed all the same (its work may
	// still run: CUDA's cuStreamDestroy releases the stream once the work
	// completed), the wait's error is returned, and Query and Synchronize
	// keep answering for that work, so that the caller keeps what it uses
	// until it is known done.
	Destroy() error
}

// MemKind is the kind of memory a device allocates (omp_target_alloc_*).
type MemKind int

const (
	MemDevice MemKind = iota // device memory, not host accessible
	MemHost                  // pinned host memory the device can access
	MemShared                // managed memory migrating between host and device
)

func (k MemKind) String() string {
	switch k {
	case MemDevice:
		return "device"
	case MemHost:
		return "host"
	case MemShared:
		return "shared"
	}
	return "MemKind(?)"
}

// Direction of a copy.
type Direction int

const (
	HostToDevice Direction = iota
	DeviceToHost
	DeviceToDevice
	HostToHost
)

func (d Direction) String() string {
	switch d {
	case HostToDevice:
		return "host-to-device"
	case DeviceToHost:
		return "device-to-host"
	case DeviceToDevice:
		return "device-to-device"
	case HostToHost:
		return "host-to-host"
	}
	return "Direction(?)"
}

// Info describes a device.
type Info struct {
	Name       string // "host", "NVIDIA H200", "gfx90a"
	Vendor     string // "host", "nvidia", "amd"
	Driver     string // library path the plugin loaded, "" for the host
	Version    string // driver version
	Memory     uint64 // total device memory in bytes (host: physical memory)
	Capability string // compute capability or gfx name
	NUMANode   int    // -1 when unknown
}
