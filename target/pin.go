package target

// Pinning memory the program already has: a Go slice (heap or global), or
// a slice over memory ompalloc allocated.

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"reflect"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// AllDevices, as Pin's device, pins for every accelerator (the host device
// when there is none).
const AllDevices = -1

// Pinned is a slice pinned by Pin. Unpin (or Close) undoes the pin; until
// then the slice's memory stays locked, and the Go object behind it stays
// reachable and in place, even when the handle holds its only reference.
// A handle dropped without Unpin is unpinned after the garbage collector
// finds it unreachable (a safety net, not a promise of when).
//
// The queue rules: a queued copy of the slice (CopyToDevice,
// CopyFromDevice) keeps the Go object reachable and in place until its
// queue has passed it, whatever the handle does; and an Unpin while such
// copies are queued does not wait for them: the lock is dropped behind
// them, by the Synchronize, Query or Close that finds them done (as
// alloc.FreeAfter frees), so the device never reads or writes unlocked
// memory. Until then IsPinned still says true.
type Pinned struct {
	r *pinRecord
}

// pinRecord is a pin's state, apart from its handle so that the handle's
// cleanup can own it: the record keeps the Go object reachable until its
// last device lock is gone.
type pinRecord struct {
	mu      sync.Mutex
	keep    unsafe.Pointer // the slice's first element: keeps the Go object reachable
	pinner  runtime.Pinner // keeps it in place (a no-op for memory outside the Go heap)
	p, n    uintptr
	devs    []*Device       // the devices whose lock the pin still holds a reference on
	busy    bool            // an unlock is running, or waits behind queued copies
	err     error           // a deferred unlock's failure, for the next Unpin or Close
	cleanup runtime.Cleanup // the handle's safety net, while armed
	armed   bool
	handle  weak.Pointer[Pinned] // to arm the safety net again after a deferred unlock failed
}

// Pin page-locks the memory of s (its len elements) for device dev, or for
// every accelerator with AllDevices, as llvm_omp_target_lock_mem does: a
// slice inside memory already locked for a device (a pinned allocator's
// block, an earlier Pin, a LockMem) only adds a reference to that lock, and
// Unpin drops it; a slice overlapping a locked range in part is refused
// (ErrOverlap). Copies of the slice then take the one-step pinned
// path, and IsPinned reports it.
//
// The element type must hold no Go pointers (a device writing into it
// would forge them). The memory must be Go heap memory, a global, or memory
// ompalloc allocated (alloc.Make, host memory from Device.Alloc): anything else is refused
// with ErrInvalidArgument, because only those are known never to move.
// A slice passed to Pin is heap-allocated by the compiler (the handle
// keeps it), so a goroutine stack, which Go moves as it grows, reaches Pin
// only through unsafe conversions — and is refused, as is foreign C memory,
// which Device.LockMem pins instead.
//
// Go heap memory stays put because Go's garbage collector does not move
// heap objects; Pin also pins the object with runtime.Pinner, the
// runtime's documented promise that it is neither moved nor freed until
// unpinned. A lock covers whole pages, and slices sharing a page share its
// lock on every driver (CUDA refuses to register a page twice, so its
// plugin registers each page once and counts references): small slices of
// one page pin and unpin independently; a page stays locked until the last
// pin on it goes.
func Pin[T any](s []T, dev int) (*Pinned, error) {
	var zero T
	typ := reflect.TypeOf(&zero).Elem()
	if cmem.HasPointers(typ) {
		return nil, fmt.Errorf("pin a []%v: %w: the type holds Go pointers, which a device must not write", typ, ErrInvalidArgument)
	}
	n := uintptr(len(s)) * unsafe.Sizeof(zero)
	if n == 0 {
		return nil, fmt.Errorf("pin a []%v of %d elements: %w: nothing to pin", typ, len(s), ErrInvalidArgument)
	}
	devs, err := pinDevices(dev)
	if err != nil {
		return nil, fmt.Errorf("pin a []%v: %w", typ, err)
	}
	ptr := unsafe.Pointer(unsafe.SliceData(s))
	p := uintptr(ptr)
	r := &pinRecord{keep: ptr, p: p, n: n}
	if !ompallocMemory(p, n) {
		if err := goMemory(ptr); err != nil {
			return nil, fmt.Errorf("pin a []%v at %#x (%d bytes): %w", typ, p, n, err)
		}
		r.pinner.Pin(ptr)
	}
	for i, d := range devs {
		if _, err := d.LockMem(p, n); err != nil {
			for _, done := range devs[:i] {
				_ = done.UnlockMem(p)
			}
			r.pinner.Unpin()
			return nil, fmt.Errorf("pin a []%v at %#x (%d bytes): %w", typ, p, n, err)
		}
	}
	r.devs = devs
	h := &Pinned{r: r}
	r.handle = weak.Make(h)
	r.arm(h)
	return h, nil
}

// arm sets the handle's safety net: unpin once h is unreachable. r.mu held
// or r not yet shared.
func (r *pinRecord) arm(h *Pinned) {
	r.cleanup = runtime.AddCleanup(h, func(r *pinRecord) {
		// As an alloc.Buffer dropped unfreed: a forgotten Unpin is a bug the
		// user should hear of, through the warning hook.
		warn.Printf(warn.Unfreed, "target", "a slice pinned by target.Pin (%d bytes at %#x) became unreachable without Unpin; the garbage collector unpinned it", r.n, r.p)
		_ = r.unpin()
	}, r)
	r.armed = true
}

// disarm stops the safety net (r.mu held).
func (r *pinRecord) disarm() {
	if r.armed {
		r.cleanup.Stop()
		r.armed = false
	}
}

// pinDevices resolves Pin's device argument.
func pinDevices(dev int) ([]*Device, error) {
	w := get()
	if dev != AllDevices {
		d, err := w.device(dev)
		if err != nil {
			return nil, err
		}
		return []*Device{d}, nil
	}
	var devs []*Device
	all := w.devices()
	for _, d := range all {
		if !d.host {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		devs = all[len(all)-1:] // the host
	}
	return devs, nil
}

// ompallocMemory reports whether [p, p+n) lies in memory ompalloc handed
// out: a live block of one of its heaps, or a range a device's registry
// knows (host memory a device allocated, memory locked for it). None of it is Go memory, and none moves.
func ompallocMemory(p, n uintptr) bool {
	if start, size, ok := heap.Containing(p); ok && n <= size && p-start <= size-n {
		return true
	}
	for _, cd := range get().Devices() { // the core's: no public layer made
		if pinnedRange(cd.Registry(), p, n) {
			return true
		}
	}
	return false
}

// goMemory returns nil when ptr points into a Go heap object or a global,
// and an error saying why not otherwise. runtime.AddCleanup accepts any
// pointer into a heap object, does nothing for a global, and refuses
// (panics) for anything else: a goroutine stack, or memory outside Go.
func goMemory(ptr unsafe.Pointer) (err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("%w: neither Go heap memory nor memory ompalloc allocated "+
				"(a goroutine stack, which Go moves, or foreign C memory: pin C memory with Device.LockMem)", ErrInvalidArgument)
		}
	}()
	c := runtime.AddCleanup((*byte)(ptr), func(int) {}, 0)
	c.Stop()
	return nil
}

// Unpin drops the pin's reference on each device's lock (the last one
// unlocks) and lets the Go object go once no lock is left.
//
// Unpin never waits for the device: while copies of the slice are still
// queued it returns at once and the locks are dropped behind them (by the
// Synchronize, Query or Close that finds them done; the driver's own
// unlock, cuMemHostUnregister, may synchronize the device there). A failed
// unlock that left the lock in place (ErrStillLocked: HSA's unlock,
// refused) keeps the handle, its lock and the Go object: Unpin or Close
// may be called again. A deferred unlock's failure is returned by the next
// Unpin or Close. A second Unpin after a complete one is an error.
func (h *Pinned) Unpin() error {
	if h == nil || h.r == nil {
		return fmt.Errorf("unpin: %w: a nil handle", ErrInvalidArgument)
	}
	return h.r.unpinHandle(h, false)
}

// Close is Unpin, except that closing an unpinned handle is not an error
// (unless an unlock deferred behind queued copies failed: Close reports it).
func (h *Pinned) Close() error {
	if h == nil || h.r == nil {
		return nil
	}
	return h.r.unpinHandle(h, true)
}

// Devices returns the numbers of the devices the slice is pinned for (its
// locks not yet dropped).
func (h *Pinned) Devices() []int {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	ids := make([]int, len(h.r.devs))
	for i, d := range h.r.devs {
		ids[i] = d.ID
	}
	return ids
}

// unpinHandle is Unpin (quiet: Close) through the handle: the safety net
// is stopped, and armed again when a failed unlock leaves locks to retry.
func (r *pinRecord) unpinHandle(h *Pinned, quiet bool) error {
	r.mu.Lock()
	r.disarm()
	r.mu.Unlock()
	err := r.unpinQuiet(quiet)
	r.mu.Lock()
	if len(r.devs) > 0 && !r.busy && !r.armed {
		r.arm(h)
	}
	r.mu.Unlock()
	return err
}

func (r *pinRecord) unpin() error { return r.unpinQuiet(false) }

// unpinQuiet drops the pin's locks, at once or behind the queued copies of
// its range. quiet: nothing left to unpin is not an error.
func (r *pinRecord) unpinQuiet(quiet bool) error {
	r.mu.Lock()
	prev := r.err
	r.err = nil
	switch {
	case r.busy:
		r.mu.Unlock()
		if quiet {
			return prev
		}
		return errors.Join(prev, fmt.Errorf("unpin %#x (%d bytes): %w: already unpinned (its unlock waits for copies still queued)", r.p, r.n, ErrInvalidArgument))
	case len(r.devs) == 0:
		r.mu.Unlock()
		if quiet || prev != nil {
			return prev
		}
		return fmt.Errorf("unpin %#x (%d bytes): %w: already unpinned", r.p, r.n, ErrInvalidArgument)
	}
	r.busy = true
	r.mu.Unlock()
	// Copies of the range still queued (the one-step pinned path reads and
	// writes it late): unlock behind them, as alloc.Free frees.
	if device.FreeAfterUse(r.p, r.n, r.unlockDeferred) {
		return prev
	}
	return errors.Join(prev, r.unlockNow())
}

// unlockDeferred runs once the copies queued at Unpin passed: copies issued
// since keep it waiting again; then it unlocks, keeping a failure for the
// next Unpin or Close.
func (r *pinRecord) unlockDeferred() {
	if device.FreeAfterUse(r.p, r.n, r.unlockDeferred) {
		return
	}
	if err := r.unlockNow(); err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.err = errors.Join(r.err, err)
		if len(r.devs) == 0 || r.armed {
			return
		}
		if h := r.handle.Value(); h != nil {
			r.arm(h) // locks left to retry: the safety net again
			return
		}
		// Nobody can retry: the driver keeps its lock, the Go object goes.
		r.pinner.Unpin()
		r.keep = nil
	}
}

// unlockNow drops the lock on every device the pin still holds. A device
// whose unlock failed with the lock and reference kept
// (ErrStillLocked) stays, for a retry; once none is left the Go
// object may go.
func (r *pinRecord) unlockNow() error {
	r.mu.Lock()
	devs := r.devs
	r.mu.Unlock()
	var errs []error
	var kept []*Device
	for _, d := range devs {
		if err := d.UnlockMem(r.p); err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrStillLocked) {
				kept = append(kept, d)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.devs = kept
	r.busy = false
	if len(kept) == 0 {
		r.pinner.Unpin()
		r.keep = nil
	}
	return errors.Join(errs...)
}

// IsPinned reports whether all of s lies in host memory page-locked for
// some device: locked or allocated through ompalloc (any device's
// registry), or registered with a GPU driver by someone else (the driver's
// own answer: cuPointerGetAttribute, hsa_amd_pointer_info), as PyTorch's
// is_pinned does. An empty slice is not pinned.
func IsPinned[T any](s []T) bool {
	var zero T
	n := uintptr(len(s)) * unsafe.Sizeof(zero)
	if n == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	defer runtime.KeepAlive(s)
	devs := get().Devices() // the core's: IsPinned makes no public layer
	for _, d := range devs {
		if pinnedRange(d.Registry(), p, n) {
			return true
		}
	}
	// Registrations outside ompalloc: ask each driver once, on a device
	// that is open already (asking opens nothing).
	asked := map[string]bool{}
	for _, d := range devs {
		if d.IsHost() || asked[d.Plugin()] || d.Closed() || !d.Opened() {
			continue
		}
		asked[d.Plugin()] = true
		if ext, ok, err := d.Impl().ExternalLock(p, n); err == nil && ok && p >= ext.Host && p-ext.Host+n <= ext.Size {
			return true
		}
	}
	return false
}
