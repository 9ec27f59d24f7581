package kmp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

// The OpenMP 6.0 memory routines beyond LLVM's: omp_get_memspace_pagesize,
// omp_target_memset[_async], and the asynchronous and rectangular copies.
//
// An OpenMP _async routine creates a task that waits for the depend objects
// it is given, and returns at once. In Go the task is a *Task: the depend
// objects are the earlier Tasks it must follow (deps), and Wait returns what
// the synchronous routine would have returned. The copies themselves run on
// a queue of the accelerator involved (target.Queue), synchronized before
// the task completes.

// Task is an asynchronous target memory operation created by an _async
// routine.
type Task struct {
	done chan struct{}
	rc   int
	err  error
}

// Wait blocks until the task is complete and returns its result: 0 on
// success, -1 (with one warning on stderr) on failure. A nil Task is
// complete and failed.
func (t *Task) Wait() int {
	if t == nil {
		return -1
	}
	<-t.done
	return t.rc
}

// Err waits for the task and returns why it failed, or nil.
func (t *Task) Err() error {
	if t == nil {
		return errors.New("ompalloc: kmp: nil task")
	}
	<-t.done
	return t.err
}

// Done reports, without blocking, whether the task is complete.
func (t *Task) Done() bool {
	if t == nil {
		return true
	}
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func failedTask(fn string, err error) *Task {
	warnf("%s: %v", fn, err)
	t := &Task{done: make(chan struct{}), rc: -1, err: err}
	close(t.done)
	return t
}

// startTask runs work after every dependence is complete. A dependence that
// failed does not stop the task (OpenMP orders tasks, it does not cancel
// them).
func startTask(fn string, deps []*Task, work func() error) *Task {
	t := &Task{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for _, d := range deps {
			if d != nil {
				<-d.done
			}
		}
		if err := work(); err != nil {
			warnf("%s: %v", fn, err)
			t.rc, t.err = -1, err
		}
	}()
	return t
}

// GetMemspacePagesize is omp_get_memspace_pagesize: the page size of the
// memory space's memory, the granularity its placement works in. For host
// memory spaces it is the system page size (transparent huge pages do not
// change it); target memory spaces report the host page size as well: the
// drivers do not tell a smaller one, and every device allocation is
// aligned at least to it. 0 and a warning for a handle that is not a
// memory space.
func GetMemspacePagesize(ms MemspaceHandle) uintptr {
	id := memspace.ID(ms)
	if id == memspace.Null || !id.Exists() {
		warnf("omp_get_memspace_pagesize: %#x is not a memory space", uintptr(ms))
		return 0
	}
	return uintptr(os.Getpagesize())
}

// asyncDevices is deviceNum for an _async copy's two devices.
func asyncDevices(dst, src int) (int, int, error) {
	d, err := deviceNum(dst)
	if err != nil {
		return d, src, err
	}
	s, err := deviceNum(src)
	return d, s, err
}

// asyncQueue opens a queue on the accelerator among dst and src devices
// (or on the host when both are the host).
func asyncQueue(dstDev, srcDev int) (*target.Queue, error) {
	dev := dstDev
	if dstDev == target.InitialDevice() {
		dev = srcDev
	}
	d, err := target.Get(dev)
	if err != nil {
		return nil, err
	}
	return d.NewQueue()
}

// withQueue runs issue on a fresh queue of the devices' accelerator and
// waits for what it issued.
func withQueue(dstDev, srcDev int, issue func(q *target.Queue) error) error {
	q, err := asyncQueue(dstDev, srcDev)
	if err != nil {
		return err
	}
	ierr := issue(q)
	serr := q.Synchronize(context.Background())
	cerr := q.Close()
	return errors.Join(ierr, serr, cerr)
}

// memcpyArgs checks omp_target_memcpy's arguments and returns the two
// addresses with their offsets applied.
func memcpyArgs(dst, src unsafe.Pointer, length, dstOffset, srcOffset uintptr, dstDevice, srcDevice int) (uintptr, uintptr, error) {
	if dst == nil || src == nil {
		return 0, 0, fmt.Errorf("nil pointer (dst %p, src %p) for %d bytes", dst, src, length)
	}
	d, s := uintptr(dst), uintptr(src)
	if d+dstOffset < d || s+srcOffset < s {
		return 0, 0, fmt.Errorf("offset wraps around the address space (dst %p+%d, src %p+%d)", dst, dstOffset, src, srcOffset)
	}
	for _, dev := range []int{dstDevice, srcDevice} {
		if _, err := target.Get(dev); err != nil {
			return 0, 0, err
		}
	}
	if err := checkBounds("destination", d, dstOffset, length, dstDevice); err != nil {
		return 0, 0, err
	}
	if err := checkBounds("source", s, srcOffset, length, srcDevice); err != nil {
		return 0, 0, err
	}
	return d + dstOffset, s + srcOffset, nil
}

// TargetMemcpyAsync is omp_target_memcpy_async: omp_target_memcpy as a task
// that starts once every task in deps is complete. Bad arguments are found
// at once (a warning, and a task that failed); the copy runs on a queue of
// the accelerator involved.
func TargetMemcpyAsync(dst, src unsafe.Pointer, length, dstOffset, srcOffset uintptr, dstDevice, srcDevice int, deps ...*Task) *Task {
	const fn = "omp_target_memcpy_async"
	dstDevice, srcDevice, err := asyncDevices(dstDevice, srcDevice)
	if err != nil {
		return failedTask(fn, err)
	}
	if length == 0 {
		return startTask(fn, deps, func() error { return nil })
	}
	d, s, err := memcpyArgs(dst, src, length, dstOffset, srcOffset, dstDevice, srcDevice)
	if err != nil {
		return failedTask(fn, err)
	}
	return startTask(fn, deps, func() error {
		return withQueue(dstDevice, srcDevice, func(q *target.Queue) error {
			return target.MemcpyAsync(d, s, length, dstDevice, srcDevice, q)
		})
	})
}

// memsetChunk bounds the host buffer a device memset copies from.
const memsetChunk = 1 << 20

// memset fills n bytes at p on device dev with c. On the host it writes
// directly; on an accelerator it copies from a host buffer of c bytes
// (through q when q is not nil), so it works for every kind of device
// memory without a vendor memset.
func memset(p uintptr, c byte, n uintptr, dev int, q *target.Queue) error {
	d, err := target.Get(dev)
	if err != nil {
		return err
	}
	if d.IsHost() {
		if q != nil {
			if err := q.Synchronize(context.Background()); err != nil {
				return err
			}
		}
		// The runtime may not know the memory (a foreign pointer): a fault
		// is an error, not the end of the process.
		return cmem.FillChecked(p, n, c)
	}
	def, _ := ompglue.Lookup(uintptr(DefaultMemAlloc))
	bn := min(n, memsetChunk)
	buf, err := def.Alloc(bn)
	if err != nil {
		return err
	}
	defer func() {
		if q != nil {
			_ = q.Synchronize(context.Background()) // the buffer is read until the copies are done
		}
		_ = alloc.Free(buf)
	}()
	src := unsafe.Slice((*byte)(buf), bn)
	for i := range src {
		src[i] = c
	}
	host := target.InitialDevice()
	for off := uintptr(0); off < n; off += bn {
		k := min(bn, n-off)
		if q != nil {
			err = target.MemcpyAsync(p+off, uintptr(buf), k, dev, host, q)
		} else {
			err = target.Memcpy(p+off, uintptr(buf), k, dev, host)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func memsetArgs(ptr unsafe.Pointer, n uintptr, dev int) error {
	if ptr == nil {
		return fmt.Errorf("nil pointer for %d bytes", n)
	}
	if _, err := target.Get(dev); err != nil {
		return err
	}
	return checkBounds("destination", uintptr(ptr), 0, n, dev)
}

// TargetMemset is omp_target_memset: it fills the first n bytes at ptr on
// device dev with the byte c (the low 8 bits of the int) and returns ptr; on
// failure it warns and returns nil. n 0 does nothing and returns ptr.
func TargetMemset(ptr unsafe.Pointer, c int, n uintptr, dev int) unsafe.Pointer {
	const fn = "omp_target_memset"
	dev, ok := devArg(fn, dev)
	if !ok {
		return nil
	}
	if n == 0 {
		return ptr
	}
	if err := memsetArgs(ptr, n, dev); err != nil {
		warnf("%s: %v", fn, err)
		return nil
	}
	if err := memset(uintptr(ptr), byte(c), n, dev, nil); err != nil {
		warnf("%s: %v", fn, err)
		return nil
	}
	return ptr
}

// TargetMemsetAsync is omp_target_memset_async: TargetMemset as a task
// after deps, on a queue of the device.
func TargetMemsetAsync(ptr unsafe.Pointer, c int, n uintptr, dev int, deps ...*Task) *Task {
	const fn = "omp_target_memset_async"
	dev, err := deviceNum(dev)
	if err != nil {
		return failedTask(fn, err)
	}
	if n == 0 {
		return startTask(fn, deps, func() error { return nil })
	}
	if err := memsetArgs(ptr, n, dev); err != nil {
		return failedTask(fn, err)
	}
	return startTask(fn, deps, func() error {
		return withQueue(dev, dev, func(q *target.Queue) error { return memset(uintptr(ptr), byte(c), n, dev, q) })
	})
}

// MaxRectDims is what TargetMemcpyRect returns when dst and src are both
// nil: any number of dimensions is supported (LLVM returns INT_MAX too).
const MaxRectDims = math.MaxInt32

// rect is a checked omp_target_memcpy_rect request.
type rect struct {
	elem                 uintptr
	volume, dOff, sOff   []uintptr
	dDims, sDims         []uintptr
	dst, src             uintptr
	dstDevice, srcDevice int
}

func rectArgs(dst, src unsafe.Pointer, elementSize uintptr, numDims int, volume, dstOffsets, srcOffsets, dstDimensions, srcDimensions []uintptr, dstDevice, srcDevice int) (*rect, error) {
	if dst == nil || src == nil {
		return nil, fmt.Errorf("nil pointer (dst %p, src %p)", dst, src)
	}
	if elementSize == 0 {
		return nil, errors.New("element size 0")
	}
	if numDims < 1 {
		return nil, fmt.Errorf("%d dimensions: want at least 1", numDims)
	}
	for _, a := range []struct {
		name string
		s    []uintptr
	}{{"volume", volume}, {"dst_offsets", dstOffsets}, {"src_offsets", srcOffsets}, {"dst_dimensions", dstDimensions}, {"src_dimensions", srcDimensions}} {
		if len(a.s) < numDims {
			return nil, fmt.Errorf("%s has %d entries for %d dimensions", a.name, len(a.s), numDims)
		}
	}
	for _, dev := range []int{dstDevice, srcDevice} {
		if _, err := target.Get(dev); err != nil {
			return nil, err
		}
	}
	r := &rect{elem: elementSize, volume: volume[:numDims], dOff: dstOffsets[:numDims], sOff: srcOffsets[:numDims],
		dDims: dstDimensions[:numDims], sDims: srcDimensions[:numDims], dst: uintptr(dst), src: uintptr(src),
		dstDevice: dstDevice, srcDevice: srcDevice}
	dExt, sExt := elementSize, elementSize
	for i := range numDims {
		if r.dOff[i] > r.dDims[i] || r.volume[i] > r.dDims[i]-r.dOff[i] {
			return nil, fmt.Errorf("dimension %d: offset %d + volume %d exceed the destination's %d", i, r.dOff[i], r.volume[i], r.dDims[i])
		}
		if r.sOff[i] > r.sDims[i] || r.volume[i] > r.sDims[i]-r.sOff[i] {
			return nil, fmt.Errorf("dimension %d: offset %d + volume %d exceed the source's %d", i, r.sOff[i], r.volume[i], r.sDims[i])
		}
		var ok1, ok2 bool
		dExt, ok1 = mulOK(dExt, r.dDims[i])
		sExt, ok2 = mulOK(sExt, r.sDims[i])
		if !ok1 || !ok2 {
			return nil, errors.New("the dimensions overflow the address space")
		}
	}
	if err := checkBounds("destination", r.dst, 0, dExt, dstDevice); err != nil {
		return nil, err
	}
	if err := checkBounds("source", r.src, 0, sExt, srcDevice); err != nil {
		return nil, err
	}
	return r, nil
}

func mulOK(a, b uintptr) (uintptr, bool) {
	if a != 0 && b > math.MaxUint/a {
		return 0, false
	}
	return a * b, true
}

// rows calls copy for every contiguous row of the sub-volume, in order:
// the innermost dimension is contiguous in both arrays.
func (r *rect) rows(copyRow func(dst, src, n uintptr) error) error {
	n := len(r.volume)
	for _, v := range r.volume {
		if v == 0 {
			return nil
		}
	}
	// Strides in bytes of each dimension.
	ds, ss := make([]uintptr, n), make([]uintptr, n)
	ds[n-1], ss[n-1] = r.elem, r.elem
	for i := n - 2; i >= 0; i-- {
		ds[i], ss[i] = ds[i+1]*r.dDims[i+1], ss[i+1]*r.sDims[i+1]
	}
	rowBytes := r.volume[n-1] * r.elem
	idx := make([]uintptr, n) // idx[n-1] stays 0
	for {
		var d, s uintptr
		for i := range n {
			d += (r.dOff[i] + idx[i]) * ds[i]
			s += (r.sOff[i] + idx[i]) * ss[i]
		}
		if err := copyRow(r.dst+d, r.src+s, rowBytes); err != nil {
			return err
		}
		i := n - 2
		for ; i >= 0; i-- {
			if idx[i]++; idx[i] < r.volume[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return nil
		}
	}
}

// TargetMemcpyRect is omp_target_memcpy_rect: it copies a numDims-
// dimensional sub-volume of elementSize-byte elements (volume[i] elements
// in dimension i, from srcOffsets in an array of srcDimensions to
// dstOffsets in an array of dstDimensions; the last dimension is the
// contiguous one, as in C) and returns 0. With dst and src both nil it
// returns MaxRectDims. Bad arguments: a warning and -1, nothing copied.
func TargetMemcpyRect(dst, src unsafe.Pointer, elementSize uintptr, numDims int, volume, dstOffsets, srcOffsets, dstDimensions, srcDimensions []uintptr, dstDevice, srcDevice int) int {
	const fn = "omp_target_memcpy_rect"
	dstDevice, srcDevice, ok := devArgs(fn, dstDevice, srcDevice)
	if !ok {
		return -1
	}
	if dst == nil && src == nil {
		return MaxRectDims
	}
	r, err := rectArgs(dst, src, elementSize, numDims, volume, dstOffsets, srcOffsets, dstDimensions, srcDimensions, dstDevice, srcDevice)
	if err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	if err := r.rows(func(d, s, n uintptr) error { return target.Memcpy(d, s, n, dstDevice, srcDevice) }); err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	return 0
}

// TargetMemcpyRectAsync is omp_target_memcpy_rect_async: TargetMemcpyRect
// as a task after deps, every row on one queue of the accelerator involved.
// With dst and src both nil it returns a completed task that reports
// success (ask TargetMemcpyRect for the number of dimensions).
func TargetMemcpyRectAsync(dst, src unsafe.Pointer, elementSize uintptr, numDims int, volume, dstOffsets, srcOffsets, dstDimensions, srcDimensions []uintptr, dstDevice, srcDevice int, deps ...*Task) *Task {
	const fn = "omp_target_memcpy_rect_async"
	dstDevice, srcDevice, err := asyncDevices(dstDevice, srcDevice)
	if err != nil {
		return failedTask(fn, err)
	}
	if dst == nil && src == nil {
		return startTask(fn, nil, func() error { return nil })
	}
	r, err := rectArgs(dst, src, elementSize, numDims, volume, dstOffsets, srcOffsets, dstDimensions, srcDimensions, dstDevice, srcDevice)
	if err != nil {
		return failedTask(fn, err)
	}
	return startTask(fn, deps, func() error {
		return withQueue(dstDevice, srcDevice, func(q *target.Queue) error {
			return r.rows(func(d, s, n uintptr) error { return target.MemcpyAsync(d, s, n, dstDevice, srcDevice, q) })
		})
	})
}
