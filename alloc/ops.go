package alloc

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"math/bits"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/handles"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/traits"
)

// Alloc returns size bytes aligned to the allocator's alignment (at least
// 16). Size 0 returns nil and no error, as omp_alloc does.
func (a *Allocator) Alloc(size uintptr) (unsafe.Pointer, error) {
	// A cached block of a plain host allocator comes from the heap's hot
	// path (heap.AllocEntry, through the handle table), which counts it,
	// counts it down for the heap profile and refuses a destroyed allocator in
	// its pinned section; every other case, and a destroyed allocator's
	// refusal, takes the general path. kmp's omp_alloc calls the hot path
	// itself.
	if p := handles.Alloc(a.head.Handle, size, noSlow); p != 0 {
		return cmem.Ptr(p), nil
	}
	return a.alloc(size, 0, false)
}

// noSlow is Allocator.Alloc's slow function for the hot path: none, it
// goes on itself.
func noSlow(*handles.Head, uintptr, uintptr) uintptr { return 0 }

// allocByHandle is handles.General: omp_alloc's way for every case the hot
// path (handles.Alloc) did not serve, without trying it again.
func allocByHandle(e *handles.Head, h, size uintptr) (p uintptr, live bool, err error) {
	var a *Allocator
	if e != nil { // h's own entry: lookup's answer, without looking again
		if e.Destroyed.Load() {
			return 0, false, nil
		}
		a = allocatorAt(unsafe.Pointer(e))
	} else if a, live = lookup(handle(h)); !live {
		return 0, false, nil
	}
	q, err := a.alloc(size, 0, false)
	return uintptr(q), true, err
}

func init() { handles.General = allocByHandle }

// AlignedAlloc is Alloc with at least the given alignment (a power of two).
func (a *Allocator) AlignedAlloc(alignment, size uintptr) (unsafe.Pointer, error) {
	if err := checkAlign(alignment); err != nil {
		return nil, err
	}
	return a.alloc(size, alignment, false)
}

// Calloc returns nmemb*size zeroed bytes; 0 for either gives nil, and an
// overflowing product gives ErrOverflow.
func (a *Allocator) Calloc(nmemb, size uintptr) (unsafe.Pointer, error) {
	return a.AlignedCalloc(0, nmemb, size)
}

// AlignedCalloc is Calloc with at least the given alignment (0: the
// allocator's own).
func (a *Allocator) AlignedCalloc(alignment, nmemb, size uintptr) (unsafe.Pointer, error) {
	if alignment != 0 {
		if err := checkAlign(alignment); err != nil {
			return nil, err
		}
	}
	if nmemb == 0 || size == 0 {
		return nil, nil
	}
	hi, n := bits.Mul64(uint64(nmemb), uint64(size))
	if hi != 0 || uint64(uintptr(n)) != n {
		return nil, fmt.Errorf("%d elements of %d bytes: %w", nmemb, size, ErrOverflow)
	}
	return a.alloc(uintptr(n), alignment, true)
}

// Realloc resizes the block at p into this allocator, as
// omp_realloc(p, size, a, omp_null_allocator) does.
func (a *Allocator) Realloc(p unsafe.Pointer, size uintptr) (unsafe.Pointer, error) {
	return realloc(p, size, a)
}

// Free releases p, whichever allocator it came from.
func (a *Allocator) Free(p unsafe.Pointer) error { return Free(p) }

func checkAlign(al uintptr) error {
	if al == 0 || al&(al-1) != 0 {
		return fmt.Errorf("alignment %d: %w: not a power of two", al, ErrInvalidArgument)
	}
	return nil
}

// alloc serves a plain host allocator's cached blocks in a function kept
// small, so that the hot path carries no frame of the general one.
func (a *Allocator) alloc(size, align uintptr, zero bool) (unsafe.Pointer, error) {
	if a.plain && size != 0 && !leakCheck.Load() {
		if a.handle() < firstRuntimeHandle {
			// Predefined allocators are never destroyed: no flag to check,
			// nothing in flight to count.
			// The heap profile (memprof) is counted down in the heap's
			// pinned section, and a sampled block recorded by sampleHook.
			q, _, err := a.heap.AllocSampled(size, max(a.align, align), a.id, zero, a.shards.t)
			if err != nil {
				p, err := a.fallbackCounted(size, align, zero, a.heapError(err), false)
				return a.sampled(size, p, err)
			}
			return cmem.Ptr(q), nil
		}
		// A runtime allocator's cached block: Enter, the destroyed check,
		// the pop and Exit in one pinned section (where membarrier is
		// registered; see heap.Tally.Enter).
		q, _, ok, refused := a.heap.AllocGuarded(size, max(a.align, align), a.id, zero, a.shards.t, &a.head.Destroyed)
		if ok {
			return cmem.Ptr(q), nil
		}
		if refused {
			return a.failed(nil, fmt.Errorf("%v: %w", a, ErrDestroyed))
		}
	}
	p, err := a.allocGeneral(size, align, zero)
	return a.sampled(size, p, err)
}

// sampled passes on an allocation's result, sampling the block for the heap
// profile when profiling is on.
func (a *Allocator) sampled(size uintptr, p unsafe.Pointer, err error) (unsafe.Pointer, error) {
	if p != nil && memsample.On() && memsample.Tick(size) {
		a.record(uintptr(p), size)
	}
	return p, err
}

// sampleHook is heap.SampleHook: it records a block of the heap's hot
// paths (AllocSampled, AllocGuarded) for the heap profile when their
// countdown took it (counted), or, where they did not count it down, when
// memsample's own does.
func sampleHook(q, size uintptr, id uint32, counted bool) {
	if counted || memsample.On() && memsample.Tick(size) {
		if a := owner(id); a != nil {
			a.record(q, size)
		}
	}
}

func init() { heap.SampleHook = sampleHook }

// record keeps the block at p, sampled for the heap profile, with its
// stack. The labels are its owner's, which is not a when a fallback served
// it.
func (a *Allocator) record(p, size uintptr) {
	o := a
	if b, err := heap.Inspect(p); err == nil {
		if x := owner(b.Owner); x != nil {
			o = x
		}
	} else if x, err := ownerOf(cmem.Ptr(p)); err == nil && x != nil {
		o = x
	}
	memsample.Record(p, size, memsample.Labels{Allocator: o.String(), Memspace: o.ms.String(), Pinned: o.traits.Pinned}, 1)
}

// allocGeneral is alloc for every other case: size 0, a quota, a pinned
// pool split per node, target memory, the leak check, or a runtime
// allocator's block that its P has not cached.
func (a *Allocator) allocGeneral(size, align uintptr, zero bool) (unsafe.Pointer, error) {
	if size == 0 {
		return nil, nil
	}
	// Destroy waits for runtime allocators' allocations in flight (see
	// heap.Tally.Enter); predefined allocators are never destroyed and skip
	// the count. Enter also checks the destroyed flag.
	counted := a.handle() >= firstRuntimeHandle
	if counted {
		if !a.shards.t.Enter(&a.head.Destroyed) {
			return a.failed(nil, fmt.Errorf("%v: %w", a, ErrDestroyed))
		}
	} else if a.head.Destroyed.Load() {
		return a.failed(nil, fmt.Errorf("%v: %w", a, ErrDestroyed))
	}
	var p unsafe.Pointer
	var err error
	if a.plain && !leakCheck.Load() {
		// try, without what a plain host allocator does not need.
		var q uintptr
		if q, _, err = a.heap.AllocCounted(size, max(a.align, align), a.id, zero, a.shards.t); err == nil {
			p = cmem.Ptr(q)
		} else {
			err = a.heapError(err)
		}
	} else {
		p, err = a.try(size, align, zero)
	}
	if err != nil {
		return a.fallbackCounted(size, align, zero, err, counted)
	}
	if counted {
		a.shards.t.Exit() // no defer: this is the hot path
	}
	return p, nil
}

// fallbackCounted runs the fallback for a failed alloc and then ends the
// allocation in flight; the defer also ends it when abort_fb panics, and
// counts the panic as a failure of the allocator asked (abort_fb may be the
// trait of an allocator down its fallback chain).
func (a *Allocator) fallbackCounted(size, align uintptr, zero bool, cause error, counted bool) (unsafe.Pointer, error) {
	if counted {
		defer a.shards.t.Exit()
	}
	aborted := true
	defer func() {
		if aborted {
			a.shards.failures.Add(1)
		}
	}()
	p, err := a.failed(a.fallback(size, align, zero, cause, 0))
	aborted = false
	return p, err
}

// try allocates from the allocator's own memory, without fallback.
func (a *Allocator) try(size, align uintptr, zero bool) (unsafe.Pointer, error) {
	al := max(a.align, align)
	if a.target != nil {
		if err := a.reservePool(size, int64(size)); err != nil {
			return nil, err
		}
		p, err := a.target.alloc(a, size, al, zero)
		if err != nil {
			if a.traits.PoolSize > 0 { // only a pool_size reserved anything
				a.releasePool(int64(size))
			}
		} else if leakCheck.Load() {
			leakRecordAlloc(a, p, size)
		}
		return p, err
	}
	var foot int64
	if a.traits.PoolSize > 0 {
		foot = int64(heap.Footprint(size, al))
		if err := a.reservePool(size, foot); err != nil {
			return nil, err
		}
	}
	var p, f uintptr
	var err error
	if a.pool != nil {
		p, f, err = a.pool.alloc(size, al, a.id, zero, a.shards.t) // the caller's node's heap
	} else {
		p, f, err = a.heap.AllocCounted(size, al, a.id, zero, a.shards.t)
	}
	if err != nil {
		a.poolUsed.Add(-foot)
		return nil, a.heapError(err)
	}
	if foot > 0 && int64(f) != foot {
		if p, _, err = a.settlePool(p, f, size, al, foot, zero); err != nil {
			return nil, err
		}
	}
	if a.ptn != nil {
		if err := a.ptn.place(p, size); err != nil {
			_ = Free(cmem.Ptr(p))
			return nil, fmt.Errorf("%v: %w", a, err)
		}
	}
	if leakCheck.Load() {
		leakRecordAlloc(a, cmem.Ptr(p), size)
	}
	return cmem.Ptr(p), nil
}

// fallback applies the fallback trait after cause made try fail.
func (a *Allocator) fallback(size, align uintptr, zero bool, cause error, depth int) (unsafe.Pointer, error) {
	switch a.traits.Fallback {
	case traits.AbortFb:
		panic(fmt.Sprintf("ompalloc: %v: abort_fb: allocation of %d bytes failed: %v", a, size, cause))
	case traits.DefaultMemFb, traits.AllocatorFb:
		fb := a.fb
		if fb == nil || depth > 64 {
			return nil, cause
		}
		if fb.handle() >= firstRuntimeHandle {
			// Destroy waits for this (Enter also checks the flag).
			if !fb.shards.t.Enter(&fb.head.Destroyed) {
				return nil, cause
			}
			defer fb.shards.t.Exit() // slow path; also ends it when abort_fb panics
		} else if fb.head.Destroyed.Load() {
			return nil, cause
		}
		a.fallbackTaken()
		if errors.Is(cause, ErrPinFailed) {
			a.pinFellBack(cause, fb)
		}
		// The block still owes the alignment of the allocator asked.
		align = max(a.align, align)
		p, err := fb.try(size, align, zero)
		if err == nil {
			return p, nil
		}
		q, err := fb.fallback(size, align, zero, err, depth+1)
		if err == nil {
			return q, nil
		}
		// Keep the first cause (errors.Is ErrPinFailed, say) and the
		// allocator that was asked. The fallback's error names it first:
		// naming it here too said it twice.
		return nil, fmt.Errorf("%w; its fallback failed too: %w", cause, err)
	}
	return nil, cause // null_fb
}

// Free releases p, whichever allocator it came from (omp_free: the handle
// passed there does not matter). nil is a no-op. A pointer this runtime did
// not return, or one already freed, is an error and changes nothing.
//
// It inlines into its callers (kmp's omp_free): a small block is freed in
// heap.FreeFast's one frame, which hands free's other work to freeCheck
// (deferred frees, the leak check, sampled blocks) and freeFollow (errors,
// the owner's follow-up) through heap's hooks.
func Free(p unsafe.Pointer) error { return heap.FreeFast(uintptr(p), true, nil) }

// freeNow is Free without waiting for copies in flight.
func freeNow(p unsafe.Pointer) error { return heap.FreeFast(uintptr(p), false, nil) }

func init() {
	heap.FreeCheckHook = func(p uintptr, mayDefer bool) (bool, error) { return freeChecks(cmem.Ptr(p), mayDefer) }
	heap.FreeFollowHook = func(p uintptr, t *heap.Tally, foot uintptr, err error) error {
		return freeFollow(cmem.Ptr(p), t, foot, err)
	}
}

// freeFollow is Free's rare tail (heap.FreeFollowHook): an error, or the
// owner's follow-up (heap.Tally.SetFollow) once the heap counted the block
// out of tally t; foot is the block's footprint.
func freeFollow(p unsafe.Pointer, t *heap.Tally, foot uintptr, err error) error {
	if err != nil {
		if errors.Is(err, heap.ErrForeign) {
			if ok, terr := freeTarget(p); ok {
				return terr
			}
		}
		return opPointerError("Free", p, err)
	}
	if freedHook != nil {
		freedHook()
	}
	// The allocator the block was counted out of. Not owner(b.Owner): once
	// heap.Free counted the block out, a destroyed owner may have been
	// released by the free of its last other block and its number given to
	// a new allocator, whose quota this free must not credit.
	a := ownerOfTally(t)
	if a == nil {
		return nil // cannot happen: owners register their tally before they allocate
	}
	if a.ptn != nil {
		a.ptn.freed(uintptr(p))
	}
	// heap.Free counted the block out of a's tally.
	if a.traits.PoolSize > 0 {
		a.releasePool(int64(foot)) // what it was charged (settlePool)
	}
	if a.head.Destroyed.Load() && a.releasable() { // the flag inline: releasable is not
		a.release()
	}
	return nil
}

// freeChecks is what Free does before the heap frees p when one of
// hooks.FreeChecks' reasons holds or a queued copy uses host memory
// (heap.FreeCheckHook). done: Free returns err without freeing (a deferred
// free, or an error).
func freeChecks(p unsafe.Pointer, mayDefer bool) (done bool, err error) {
	if mayDefer && (deferredFrees.Load() > 0 || device.HostInUse()) {
		// A queued copy may still read or write the block (FreeAfter).
		if deferred, err := freeAfterUse(p); deferred || err != nil {
			return true, err
		}
	}
	if leakCheck.Load() {
		// Before the block is freed: once it is, another goroutine may get
		// the same address and record its own stack.
		leakForget(p)
	}
	if memsample.Tracking() {
		memsample.Forget(uintptr(p))
	}
	return false, nil
}

// freedHook, set by tests only, runs in free between the heap's count-out
// and the owner's bookkeeping: the window in which another free can release
// a destroyed owner.
var freedHook func()

// realloc moves the block at p into a block of size bytes from a (the
// block's own allocator when a is nil: kmp's omp_realloc, through
// internal/ompglue, does the same), copying min(old, new) bytes, and
// frees p. p nil allocates; size 0 frees and returns nil. On failure p is
// untouched and still valid.
func realloc(p unsafe.Pointer, size uintptr, a *Allocator) (unsafe.Pointer, error) {
	if p == nil {
		if a == nil {
			a = Default()
		}
		return a.Alloc(size)
	}
	if size == 0 {
		return nil, Free(p)
	}
	b, err := heap.Inspect(uintptr(p))
	if err != nil {
		if errors.Is(err, heap.ErrForeign) && isTarget(p) {
			return nil, fmt.Errorf("target memory at %p: %w: it cannot be reallocated", p, ErrNotSupported)
		}
		return nil, opPointerError("Realloc", p, err)
	}
	if a == nil {
		if a = owner(b.Owner); a == nil || a.head.Destroyed.Load() {
			a = Default()
		}
	}
	if a.heap != nil && (a.heap == b.Heap || a.pool != nil && a.pool.has(b.Heap)) && a.id == b.Owner && !a.head.Destroyed.Load() {
		// Within its size class, page run or huge region the block grows
		// (or shrinks) in place: same footprint, so the pool_size charge,
		// which is the footprint, does not change either.
		if old, ok, err := heap.ResizeInClass(uintptr(p), size, a.align); err == nil && ok {
			a.shards.t.Resize(int64(old.Size), int64(size))
			if leakCheck.Load() {
				leakResized(p, size)
			}
			return p, nil
		}
	}
	np, err := a.alloc(size, 0, false)
	if err != nil {
		return nil, err
	}
	if np == nil { // a target allocator handed back nothing
		return nil, fmt.Errorf("%v: %w: no memory returned for a realloc of %p", a, ErrNotSupported, p)
	}
	cmem.Copy(uintptr(np), uintptr(p), min(b.Size, size))
	if err := Free(p); err != nil {
		return np, err
	}
	return np, nil
}

// blockSize returns the requested size of the live block at p, from a heap
// or from a target memory space (Inspect tells more).
func blockSize(p unsafe.Pointer) (uintptr, error) {
	info, err := Inspect(p)
	return info.Size, err
}

// ownerOf returns the allocator of the live block at p (Inspect's Allocator).
func ownerOf(p unsafe.Pointer) (*Allocator, error) {
	info, err := Inspect(p)
	return info.Allocator, err
}

// Trim gives the cached free memory of every host heap back to the
// system, and every pinned pool's idle memory (empty chunks unlocked and
// unmapped, freed huge regions and spare pages released: CuPy's
// free_all_blocks), and returns the bytes released. It never touches a live
// block; it costs a garbage-collection cycle per heap that holds memory.
// Device memory is target's: Device.TrimPool.
func Trim() uintptr {
	return hostHeap().Trim() + trimPinnedBytes()
}
