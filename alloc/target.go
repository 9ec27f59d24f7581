package alloc

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/target/plugin"
	"github.com/ompalloc/ompalloc/traits"
)

// targetBackend serves the target memory spaces
// (llvm_omp_target_host/shared/device_mem_space) from a device's plugin:
// one driver allocation per block, as libomptarget does. Device memory is
// not host-accessible, so these blocks carry no header; a map finds them.
type targetBackend struct {
	kind plugin.MemKind
	dev  int // -1: the default device at allocation time
}

type targetBlock struct {
	a    *Allocator
	dev  *target.Device
	kind plugin.MemKind
	size uintptr
}

var targetBlocks sync.Map // uintptr → targetBlock

func newTargetBackend(ms memspace.ID, set traits.Set) (*targetBackend, error) {
	tb := &targetBackend{dev: set.PreferredDevice}
	switch ms {
	case memspace.TargetHost:
		tb.kind = plugin.MemHost
	case memspace.TargetShared:
		tb.kind = plugin.MemShared
	case memspace.TargetDevice:
		tb.kind = plugin.MemDevice
	default:
		return nil, fmt.Errorf("%w: %v is not a target memory space", ErrInvalidArgument, ms)
	}
	return tb, nil
}

func (tb *targetBackend) alloc(a *Allocator, size, align uintptr, zero bool) (unsafe.Pointer, error) {
	dev := tb.dev
	if dev < 0 {
		dev = target.DefaultDevice()
	}
	d, err := target.Get(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %w", ErrDevice, a, err)
	}
	if zero && tb.kind == plugin.MemDevice && !d.IsHost() {
		return nil, fmt.Errorf("%w: zeroed device memory from %v", ErrNotSupported, a)
	}
	p, err := d.Alloc(tb.kind, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %w", ErrDevice, a, err)
	}
	if p%align != 0 {
		_ = d.Free(tb.kind, p)
		return nil, fmt.Errorf("%w: device %d returned %#x, not aligned to %d", ErrNotSupported, dev, p, align)
	}
	if zero {
		cmem.Zero(p, size)
	}
	targetBlocks.Store(p, targetBlock{a: a, dev: d, kind: tb.kind, size: size})
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
	if b.a.traits.PoolSize > 0 {
		b.a.releasePool(int64(b.size))
	}
	if b.a.releasable() {
		b.a.release()
	}
	if err := b.dev.Free(b.kind, uintptr(p)); err != nil {
		return true, fmt.Errorf("%w: %v: free of %p: %w", ErrDevice, b.a, p, err)
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
