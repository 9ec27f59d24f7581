package target

// Typed copies: []T to and from device memory, and device to device, with
// no uintptr or unsafe in the caller's code.

import (
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/heap"
)

// Array is Len elements of T in memory of a device (AllocArray,
// PoolArray), or a part of them (Slice). T holds no Go pointers. Device
// memory of a GPU is reached only through copies (CopyToDevice,
// CopyFromDevice, CopyArray) and by the device's own code (Pointer);
// host-accessible memory also through Host.
type Array[T any] struct {
	m memory
}

// AllocArray allocates n elements of T of the given kind on d, from the
// driver (Device.Alloc). For device memory made and dropped in a loop, take
// it from the device's pool with PoolArray: cuMemAlloc/cuMemFree
// synchronize the device.
func AllocArray[T any](d *Device, kind MemKind, n int) (Array[T], error) {
	typ, sz, err := elemType[T]()
	if err != nil {
		return Array[T]{}, fmt.Errorf("%v: %w", d, err)
	}
	if n <= 0 {
		return Array[T]{}, fmt.Errorf("%v: an array of %d %v: %w", d, n, typ, ErrInvalidArgument)
	}
	if size := uintptr(n) * sz; size/sz != uintptr(n) {
		return Array[T]{}, fmt.Errorf("%v: an array of %d elements of %d bytes: %w: the size overflows", d, n, sz, ErrInvalidArgument)
	}
	m, err := d.allocMemory(kind, uintptr(n)*sz)
	if err != nil {
		return Array[T]{}, err
	}
	return Array[T]{m: m}, nil
}

// PoolArray allocates n elements of T of device memory from d's pool for
// use on q (PoolAlloc: nil for any use at once). Free it with FreeOn(q),
// or with Free (which waits for every queue of the device).
func PoolArray[T any](d *Device, n int, q *Queue) (Array[T], error) {
	typ, sz, err := elemType[T]()
	if err != nil {
		return Array[T]{}, fmt.Errorf("%v: %w", d, err)
	}
	if n <= 0 {
		return Array[T]{}, fmt.Errorf("%v: an array of %d %v: %w", d, n, typ, ErrInvalidArgument)
	}
	return poolArray[T](d, n, sz, q)
}

func poolArray[T any](d *Device, n int, sz uintptr, q *Queue) (Array[T], error) {
	size := uintptr(n) * sz
	if size/sz != uintptr(n) {
		return Array[T]{}, fmt.Errorf("%v: an array of %d elements of %d bytes: %w: the size overflows", d, n, sz, ErrInvalidArgument)
	}
	p, err := d.PoolAlloc(size, q)
	if err != nil {
		return Array[T]{}, err
	}
	return Array[T]{m: memory{Device: d, Kind: MemDevice, Addr: p, Size: size, pool: true}}, nil
}

// FreeOn frees the array in q's order: the work issued on q so far may
// still use it. A pool array (PoolArray) goes
// back to the pool with PoolFree(q): q's later allocations may reuse it at
// once, other queues' once that work completed, and work other queues
// recorded on it (their copies, RecordUse) is waited for as well. Other
// memory is freed once q's work issued so far has completed
// (Queue.OnDone; a failure of that later free is not reported).
func (a Array[T]) FreeOn(q *Queue) error {
	if a.m.Device == nil {
		return fmt.Errorf("free of a zero Array: %w", ErrInvalidArgument)
	}
	if q == nil {
		return a.Free()
	}
	if a.m.pool {
		return a.m.Device.PoolFree(a.m.Addr, q)
	}
	m := a.m
	return q.OnDone(func() { _ = m.free() })
}

// arrayOf views m as an Array of T. Its size must be a whole number of
// elements, and T must hold no Go pointers.
func arrayOf[T any](m memory) (Array[T], error) {
	typ, sz, err := elemType[T]()
	if err != nil {
		return Array[T]{}, err
	}
	if m.Device == nil || m.Addr == 0 || m.Size%sz != 0 {
		return Array[T]{}, fmt.Errorf("an array of %v over %d bytes at %#x: %w: no device, no memory, or not a whole number of %d-byte elements",
			typ, m.Size, m.Addr, ErrInvalidArgument, sz)
	}
	return Array[T]{m: m}, nil
}

func elemType[T any]() (reflect.Type, uintptr, error) {
	var zero T
	typ := reflect.TypeOf(&zero).Elem()
	if cmem.HasPointers(typ) {
		return typ, 0, fmt.Errorf("an array of %v: %w: the type holds Go pointers, which must not live in device memory", typ, ErrInvalidArgument)
	}
	sz := unsafe.Sizeof(zero)
	if sz == 0 {
		return typ, 0, fmt.Errorf("an array of %v: %w: a zero-size type", typ, ErrInvalidArgument)
	}
	return typ, sz, nil
}

func elemSize[T any]() uintptr {
	var zero T
	return unsafe.Sizeof(zero)
}

// Len is the number of elements.
func (a Array[T]) Len() int {
	if a.m.Size == 0 {
		return 0
	}
	return int(a.m.Size / elemSize[T]())
}

// Device is the device whose memory it is.
func (a Array[T]) Device() *Device { return a.m.Device }

// Pointer returns the address of the first element as an unsafe.Pointer,
// for the device's own code (a kernel's argument, C code, Queue.RecordUse
// as a uintptr): the device's address for device memory, the host's for
// host and shared memory. Device memory on a GPU is not host memory: never
// dereference it; Host says whether the host may.
func (a Array[T]) Pointer() unsafe.Pointer { return cmem.Ptr(a.m.Addr) }

// Slice returns elements [i, j) as an Array over the same memory, as a[i:j]
// does for a slice.
func (a Array[T]) Slice(i, j int) (Array[T], error) {
	if i < 0 || j < i || j > a.Len() {
		return Array[T]{}, fmt.Errorf("slice [%d:%d] of an array of %d elements: %w", i, j, a.Len(), ErrInvalidArgument)
	}
	sz := elemSize[T]()
	m := a.m
	m.Addr += uintptr(i) * sz
	m.Size = uintptr(j-i) * sz
	return Array[T]{m: m}, nil
}

// Free releases the memory AllocArray or PoolArray allocated (not a Slice
// of it). A pool array goes back to the pool without a queue: it is handed
// out again once the work issued so far on every queue of the device has
// completed; the host does not wait.
func (a Array[T]) Free() error { return a.m.free() }

// Host returns the elements as a []T when the host may touch them (host
// and shared memory, any memory of the host device); GPU device memory is
// an error (ErrInvalidArgument).
func (a Array[T]) Host() ([]T, error) { return hostSlice[T](a.m) }

// String describes the array for errors.
func (a Array[T]) String() string {
	var zero T
	return fmt.Sprintf("[%d]%v at %#x on %v", a.Len(), reflect.TypeOf(&zero).Elem(), a.m.Addr, a.m.Device)
}

// CopyToDevice copies src into dst, which must have as many elements. With
// q nil it is complete on return; otherwise it is queued on q (a queue of
// dst's device) and src must not change until q's work is done
// (Synchronize, an event). A Go slice stays reachable and in place until
// the queue passed the copy (runtime.Pinner), also one Pin locked whose
// handle is unpinned or dropped meanwhile; a pinned source (Pin, a pinned
// allocator) goes in one DMA.
func CopyToDevice[T any](dst Array[T], src []T, q *Queue) error {
	if err := checkTyped(dst, len(src), "copy to"); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	n := dst.m.Size
	p := uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	keep, err := holdHost(unsafe.Pointer(unsafe.SliceData(src)), p, n, q)
	if err != nil {
		return err
	}
	err = dst.m.Device.submit(dst.m.Addr, p, n, q)
	keep.done(q, err)
	runtime.KeepAlive(src)
	return err
}

// CopyFromDevice copies src into dst, which must have as many elements.
// With q nil it is complete on return; otherwise it is queued on q (a
// queue of src's device) and dst must not be read until q's work is done;
// a Go slice stays reachable and in place until the queue passed the copy.
func CopyFromDevice[T any](dst []T, src Array[T], q *Queue) error {
	if err := checkTyped(src, len(dst), "copy from"); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	n := src.m.Size
	p := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	keep, err := holdHost(unsafe.Pointer(unsafe.SliceData(dst)), p, n, q)
	if err != nil {
		return err
	}
	err = src.m.Device.retrieve(p, src.m.Addr, n, q)
	keep.done(q, err)
	runtime.KeepAlive(dst)
	return err
}

// CopyArray copies src into dst, arrays of the same length on the same
// device or on two devices (Memcpy's paths: device to device where the
// driver can, else through pinned host buffers). With q nil it is complete
// on return; otherwise it is queued on q, a queue of one of the two devices.
func CopyArray[T any](dst, src Array[T], q *Queue) error {
	if err := checkTyped(dst, src.Len(), "copy to"); err != nil {
		return err
	}
	if src.m.Device == nil {
		return fmt.Errorf("copy from a zero Array: %w", ErrInvalidArgument)
	}
	if src.Len() == 0 {
		return nil
	}
	if q == nil {
		return Memcpy(dst.m.Addr, src.m.Addr, src.m.Size, dst.m.Device.ID, src.m.Device.ID)
	}
	return MemcpyAsync(dst.m.Addr, src.m.Addr, src.m.Size, dst.m.Device.ID, src.m.Device.ID, q)
}

func checkTyped[T any](a Array[T], n int, what string) error {
	if a.m.Device == nil {
		return fmt.Errorf("%s a zero Array: %w", what, ErrInvalidArgument)
	}
	if a.Len() != n {
		return fmt.Errorf("%s %v: %w: %d elements on the other side (copy a Slice of the array)", what, a, ErrInvalidArgument, n)
	}
	return nil
}

// hostHold keeps the Go memory of a queued copy reachable and in place
// until the copy completed.
type hostHold struct {
	pinner *runtime.Pinner
}

// holdHost pins ptr's Go object (runtime.Pinner: not moved, not freed) for
// a queued copy, until the queue passed the copy: also for a slice Pin
// locked, whose handle may be unpinned (or dropped) while the copy is
// queued (issue 27 item 1). Synchronous copies, and blocks of ompalloc's
// heaps (C memory), need nothing; for other memory outside the Go heap the
// pin is a no-op.
func holdHost(ptr unsafe.Pointer, p, n uintptr, q *Queue) (hostHold, error) {
	if q == nil || heapMemory(p, n) {
		return hostHold{}, nil
	}
	pn := new(runtime.Pinner)
	pn.Pin(ptr) // a no-op for memory outside the Go heap
	return hostHold{pinner: pn}, nil
}

// heapMemory reports whether [p, p+n) lies in a live block of one of
// ompalloc's heaps (C memory, never Go's).
func heapMemory(p, n uintptr) bool {
	start, size, ok := heap.Containing(p)
	return ok && n <= size && p-start <= size-n
}

// done hands the pin to q, to be undone once the copy issued before it has
// completed; after a failed copy it is undone at once.
func (h hostHold) done(q *Queue, err error) {
	if h.pinner == nil {
		return
	}
	if err != nil || q.after(h.pinner.Unpin) != nil {
		h.pinner.Unpin()
	}
}

// after runs fn once the work issued on q so far has completed, like
// OnDone but without asking the driver now: the copy just issued is
// rarely done yet.
func (q *Queue) after(fn func()) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrQueueClosed
	}
	q.appendLocked(pending{fn: fn})
	return nil
}
