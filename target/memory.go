package target

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

// Memory is a block of device memory from AllocMemory: what Alloc returns,
// with its device, kind and size kept, so that it becomes an unsafe.Pointer
// or a slice without the uintptr conversion go vet warns about.
type Memory struct {
	Device *Device
	Kind   MemKind
	Addr   uintptr // the host's address for host and shared memory; the device's for device memory
	Size   uintptr

	pool bool // a block of Device's pool (AllocArray, PoolArray): Free is PoolFree
}

// AllocMemory is Alloc, returning a Memory.
func (d *Device) AllocMemory(kind MemKind, n uintptr) (Memory, error) {
	p, err := d.Alloc(kind, n)
	if err != nil {
		return Memory{}, err
	}
	return Memory{Device: d, Kind: kind, Addr: p, Size: n}, nil
}

// Free releases the memory (Device.Free with its kind; for a block of the
// device pool, PoolFree without a queue).
func (m Memory) Free() error {
	if m.Device == nil {
		return fmt.Errorf("free of a zero Memory: %w", ErrInvalidArgument)
	}
	if m.pool {
		return m.Device.PoolFree(m.Addr, nil)
	}
	return m.Device.Free(m.Kind, m.Addr)
}

// Pointer returns the address as an unsafe.Pointer, for C code, copies and
// drivers. Device memory on a GPU is not host memory: never dereference it.
func (m Memory) Pointer() unsafe.Pointer { return cmem.Ptr(m.Addr) }

// HostAccessible reports whether the host may read and write the memory:
// host and shared memory, and every kind on the host device.
func (m Memory) HostAccessible() bool {
	return m.Addr != 0 && (m.Kind != MemDevice || (m.Device != nil && m.Device.IsHost()))
}

// Bytes returns the memory as a []byte (len == cap == Size), if the host
// may touch it; device memory of a GPU is an error (ErrInvalidArgument)
// that says so.
func (m Memory) Bytes() ([]byte, error) { return Slice[byte](m) }

// Slice returns host-accessible memory as a []T of Size/sizeof(T) elements
// (len == cap). T must hold no Go pointers, and Size must be a multiple of
// its size. Device memory of a GPU is an error (ErrInvalidArgument).
func Slice[T any](m Memory) ([]T, error) {
	var zero T
	typ := reflect.TypeOf(&zero).Elem()
	if !m.HostAccessible() {
		return nil, fmt.Errorf("%v: a []%v over %s memory at %#x: %w: the host cannot access it (copy it with Memcpy)",
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
