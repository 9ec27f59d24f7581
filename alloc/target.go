package alloc

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// targetBackend serves the target memory spaces
// (llvm_omp_target_host/shared/device_mem_space) from a device's plugin:
// host and shared memory one driver allocation per block, as libomptarget
// does; a GPU's device memory from the device's caching pool
// (target.Device.PoolAlloc: CUDA's stream-ordered allocator where the GPU
// has memory pools, else a size-class cache), so that a free and a new
// allocation skip cuMemAlloc/cuMemFree and their device synchronization.
// The allocator's pool_size still bounds
// the bytes it hands out. Device memory is not host-accessible, so these
// blocks carry no header; a map finds them.
type targetBackend struct {
	kind target.MemKind
	dev  int // -1: the default device at allocation time
}

type targetBlock struct {
	a      *Allocator
	dev    *target.Device
	kind   target.MemKind
	size   uintptr
	base   uintptr // what the driver returned: below the block when it was aligned up
	charge int64   // what the block took from the allocator's pool_size (0 without one)
	pooled bool    // base came from the device's caching pool
}

// targetAllocOn allocates n bytes of kind on d: device memory of a GPU
// from its caching pool (a miss asks the driver and fails as it does),
// the rest from the driver.
func targetAllocOn(d *target.Device, kind target.MemKind, n uintptr, pooled bool) (uintptr, error) {
	if pooled {
		return d.PoolAlloc(n, nil)
	}
	return d.Alloc(kind, n)
}

// targetFreeOn returns what targetAllocOn returned.
func targetFreeOn(d *target.Device, kind target.MemKind, p uintptr, pooled bool) error {
	if pooled {
		return d.PoolFree(p, nil)
	}
	return d.Free(kind, p)
}

var targetBlocks sync.Map // uintptr → targetBlock

func newTargetBackend(ms memspace.ID, set traits.Set) (*targetBackend, error) {
	tb := &targetBackend{dev: set.PreferredDevice}
	switch ms {
	case memspace.TargetHost:
		tb.kind = target.MemHost
	case memspace.TargetShared:
		tb.kind = target.MemShared
	case memspace.TargetDevice:
		tb.kind = target.MemDevice
	default:
		return nil, fmt.Errorf("new allocator: %w: %v is not a target memory space", ErrInvalidArgument, ms)
	}
	return tb, nil
}

// alloc serves a block of a target memory space. A driver aligns its
// blocks to what it aligns them to (a page for the host device, 256 or 512
// bytes for CUDA), not to the allocator's alignment trait: when the address
// it returned is not aligned, the block is allocated again align-1 bytes
// larger and the aligned address inside it handed out, keeping the base for
// the free, as the host heap does. The caller reserved size bytes of the
// pool (if any); alloc reserves the extra itself and, on every failure,
// releases exactly that.
func (tb *targetBackend) alloc(a *Allocator, size, align uintptr, zero bool) (unsafe.Pointer, error) {
	dev := tb.dev
	if dev < 0 {
		dev = target.DefaultDevice()
	}
	d, err := target.Get(dev)
	if err != nil {
		return nil, fmt.Errorf("%v: %w: %w", a, ErrDevice, err)
	}
	if zero && tb.kind == target.MemDevice && !d.IsHost() {
		return nil, fmt.Errorf("%v: %w: zeroed device memory", a, ErrNotSupported)
	}
	pooled := tb.kind == target.MemDevice && !d.IsHost()
	base, err := targetAllocOn(d, tb.kind, size, pooled)
	if err != nil {
		return nil, fmt.Errorf("%v: %w: %w", a, ErrDevice, err)
	}
	p, extra := base, uintptr(0)
	if base%align != 0 {
		if err := targetFreeOn(d, tb.kind, base, pooled); err != nil {
			return nil, fmt.Errorf("%v: %w: free of a misaligned block to allocate it again: %w", a, ErrDevice, err)
		}
		extra = align - 1
		if size+extra < size {
			return nil, fmt.Errorf("%v: %w: %d bytes aligned to %d", a, ErrTooLarge, size, align)
		}
		if a.traits.PoolSize > 0 {
			if err := a.reservePool(size+extra, int64(extra)); err != nil {
				return nil, err
			}
		}
		if base, err = targetAllocOn(d, tb.kind, size+extra, pooled); err != nil {
			if a.traits.PoolSize > 0 {
				a.releasePool(int64(extra))
			}
			return nil, fmt.Errorf("%v: %w: %d bytes aligned to %d: %w", a, ErrDevice, size, align, err)
		}
		p = (base + extra) &^ extra
	}
	if zero {
		cmem.Zero(p, size)
	}
	b := targetBlock{a: a, dev: d, kind: tb.kind, size: size, base: base, pooled: pooled}
	if a.traits.PoolSize > 0 {
		b.charge = int64(size + extra)
	}
	targetBlocks.Store(p, b)
	a.count(int64(size), int64(size))
	return cmem.Ptr(p), nil
}

func freeTarget(p unsafe.Pointer) (bool, error) {
	v, ok := targetBlocks.LoadAndDelete(uintptr(p))
	if !ok {
		return false, nil
	}
	b := v.(targetBlock)
	b.a.count(-int64(b.size), -int64(b.size))
	b.a.releasePool(b.charge)
	if b.a.releasable() {
		b.a.release()
	}
	if err := targetFreeOn(b.dev, b.kind, b.base, b.pooled); err != nil {
		return true, fmt.Errorf("Free(%p) of %v: %w: %w", p, b.a, ErrDevice, err)
	}
	return true, nil
}

func isTarget(p unsafe.Pointer) bool {
	_, ok := targetBlocks.Load(uintptr(p))
	return ok
}

func targetOwner(p unsafe.Pointer) (*Allocator, bool) {
	v, ok := targetBlocks.Load(uintptr(p))
	if !ok {
		return nil, false
	}
	return v.(targetBlock).a, true
}
