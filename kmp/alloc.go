package kmp

import (
	"errors"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/handles"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// InitAllocator is omp_init_allocator. Invalid traits give NullAllocator
// and one warning naming the trait.
func InitAllocator(ms MemspaceHandle, ts []AllocTrait) AllocatorHandle {
	list := make([]traits.Trait, len(ts))
	for i, t := range ts {
		list[i] = traits.Trait{Key: traits.Key(t.Key), Value: t.Value}
	}
	a, err := alloc.NewFromTraits(memspace.ID(ms), list)
	if err != nil {
		warnf("omp_init_allocator: %v; returning omp_null_allocator", err)
		return NullAllocator
	}
	// A failed pin that sends blocks to the fallback is warned about once
	// per allocator by alloc itself.
	return AllocatorHandle(ompglue.Handle(a))
}

// DestroyAllocator is omp_destroy_allocator. Live blocks are reported and
// stay valid until freed.
func DestroyAllocator(a AllocatorHandle) {
	if a == NullAllocator {
		return
	}
	al, ok := ompglue.Lookup(uintptr(a))
	if !ok {
		warnf("omp_destroy_allocator: %s is not a live allocator", ompglue.Name(uintptr(a)))
		return
	}
	// Live blocks: Destroy has already warned through the hook.
	if err := al.Destroy(); err != nil && !errors.Is(err, alloc.ErrLiveBlocks) {
		warnf("omp_destroy_allocator: %v", err)
	}
}

// SetDefaultAllocator is omp_set_default_allocator; NullAllocator restores
// omp_default_mem_alloc. The default is process-wide here.
func SetDefaultAllocator(a AllocatorHandle) {
	if a == NullAllocator {
		alloc.SetDefault(nil)
		return
	}
	al, ok := ompglue.Lookup(uintptr(a))
	if !ok {
		warnf("omp_set_default_allocator: %s is not a live allocator; default unchanged", ompglue.Name(uintptr(a)))
		return
	}
	alloc.SetDefault(al)
}

// GetDefaultAllocator is omp_get_default_allocator.
func GetDefaultAllocator() AllocatorHandle { return AllocatorHandle(ompglue.Handle(alloc.Default())) }

func resolve(fn string, a AllocatorHandle) *alloc.Allocator {
	al, ok := ompglue.Lookup(uintptr(a))
	if !ok {
		warnf("%s: %s is not a live allocator", fn, ompglue.Name(uintptr(a)))
		return nil
	}
	return al
}

// report warns about bad input; allocation failures that the fallback trait
// turned into nil are not warned about, as in libomp.
func report(fn string, err error) {
	if err != nil {
		reportErr(fn, err)
	}
}

func reportErr(fn string, err error) {
	if errors.Is(err, alloc.ErrPoolExhausted) || errors.Is(err, alloc.ErrOutOfMemory) ||
		errors.Is(err, alloc.ErrPinFailed) {
		return
	}
	warnf("%s: %v", fn, err)
}

// Alloc is omp_alloc.
//
// It inlines into its caller: a cached block of a live plain host
// allocator costs heap.AllocEntry's one frame (the handle's entry, its
// generation and destroyed flag, the P's cache and the owner's counters);
// every other case goes to allocSlow.
func Alloc(size uintptr, a AllocatorHandle) unsafe.Pointer {
	return cmem.Ptr(handles.Alloc(uintptr(a), size, allocSlow))
}

// allocSlow is Alloc for every case the hot path does not serve: the
// general path, a handle that names no live allocator (warned about), the
// default allocator for the null handle.
func allocSlow(e *handles.Head, h, size uintptr) uintptr {
	p, live, err := handles.General(e, h, size)
	if !live {
		warnf("omp_alloc: %s is not a live allocator", ompglue.Name(uintptr(h)))
		return 0
	}
	report("omp_alloc", err)
	return p
}

// AlignedAlloc is omp_aligned_alloc.
func AlignedAlloc(alignment, size uintptr, a AllocatorHandle) unsafe.Pointer {
	al := resolve("omp_aligned_alloc", a)
	if al == nil {
		return nil
	}
	p, err := al.AlignedAlloc(alignment, size)
	report("omp_aligned_alloc", err)
	return p
}

// Calloc is omp_calloc.
func Calloc(nmemb, size uintptr, a AllocatorHandle) unsafe.Pointer {
	al := resolve("omp_calloc", a)
	if al == nil {
		return nil
	}
	p, err := al.Calloc(nmemb, size)
	report("omp_calloc", err)
	return p
}

// AlignedCalloc is omp_aligned_calloc.
func AlignedCalloc(alignment, nmemb, size uintptr, a AllocatorHandle) unsafe.Pointer {
	al := resolve("omp_aligned_calloc", a)
	if al == nil {
		return nil
	}
	p, err := al.AlignedCalloc(alignment, nmemb, size) // 0: the allocator's own alignment
	report("omp_aligned_calloc", err)
	return p
}

// Realloc is omp_realloc: size 0 frees ptr and returns nil; a nil ptr
// allocates; on failure ptr is left intact. A NullAllocator a means the
// block's own allocator. freeA is ignored: each block knows its allocator.
func Realloc(ptr unsafe.Pointer, size uintptr, a, freeA AllocatorHandle) unsafe.Pointer {
	if a == NullAllocator {
		p, err := ompglue.Realloc(ptr, size) // into the block's own allocator
		report("omp_realloc", err)
		return p
	}
	al := resolve("omp_realloc", a)
	if al == nil {
		return nil
	}
	p, err := al.Realloc(ptr, size)
	report("omp_realloc", err)
	return p
}

// Free is omp_free. The block's own allocator releases it whatever handle
// is passed; nil is a no-op; double frees and foreign pointers are
// reported and change nothing.
func Free(ptr unsafe.Pointer, a AllocatorHandle) {
	handles.Free(uintptr(ptr), warnFree)
}

// warnFree is omp_free's warning (handles.Free's report).
func warnFree(_ uintptr, err error) { warnf("omp_free: %v", err) }
