package target

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

// memory is a block of memory of a device behind an Array: what Alloc or
// PoolAlloc returned, with its device, kind and size kept.
type memory struct {
	Device *Device
	Kind   MemKind
	Addr   uintptr // the host's address for host and shared memory; the device's for device memory
	Size   uintptr

	pool bool // a block of Device's pool (AllocArray, PoolArray): free is PoolFree
}

// allocMemory is Alloc, returning a memory.
func (d *Device) allocMemory(kind MemKind, n uintptr) (memory, error) {
	p, err := d.Alloc(kind, n)
	if err != nil {
		return memory{}, err
	}
	return memory{Device: d, Kind: kind, Addr: p, Size: n}, nil
}

// free releases the memory (Device.Free with its kind; for a block of the
// device pool, PoolFree without a queue).
func (m memory) free() error {
	if m.Device == nil {
		return fmt.Errorf("free of a zero Array: %w", ErrInvalidArgument)
	}
	if m.pool {
		return m.Device.PoolFree(m.Addr, nil)
	}
	return m.Device.Free(m.Kind, m.Addr)
}

// hostAccessible reports whether the host may read and write the memory:
// host and shared memory, and every kind on the host device.
func (m memory) hostAccessible() bool {
	return m.Addr != 0 && (m.Kind != MemDevice || (m.Device != nil && m.Device.IsHost()))
}

// hostSlice returns host-accessible memory as a []T of Size/sizeof(T)
// elements (len == cap). T must hold no Go pointers, and Size must be a
// multiple of its size. Device memory of a GPU is an error
// (ErrInvalidArgument).
func hostSlice[T any](m memory) ([]T, error) {
	var zero T
	typ := reflect.TypeOf(&zero).Elem()
	if !m.hostAccessible() {
		return nil, fmt.Errorf("%v: a []%v over %s memory at %#x: %w: the host cannot access it (copy it with CopyFromDevice)",
			m.Device, typ, m.Kind, m.Addr, ErrInvalidArgument)
	}
	if cmem.HasPointers(typ) {
		return nil, fmt.Errorf("%v: a []%v: %w: the type holds Go pointers, which must not live in device memory", m.Device, typ, ErrInvalidArgument)
	}
	sz := unsafe.Sizeof(zero)
	if sz == 0 || m.Size%sz != 0 {
		return nil, fmt.Errorf("%v: a []%v over %d bytes: %w: not a whole number of %d-byte elements", m.Device, typ, m.Size, ErrInvalidArgument, sz)
	}
	return unsafe.Slice((*T)(cmem.Ptr(m.Addr)), m.Size/sz), nil
}
