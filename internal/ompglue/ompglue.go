// Package ompglue is what package kmp, the omp.h mirror, needs of package
// alloc that a Go program does not: an allocator by its
// omp_allocator_handle_t number, an allocator's number, omp_realloc's
// "the block's own allocator", and the block around an interior address
// (omp_target_memcpy's bounds checks). A Go program holds *alloc.Allocator
// values and the slices Make returns, so alloc does not export these.
//
// A handle is the number alloc gives each allocator: 0 the null allocator,
// 1..8 and 100..102 the predefined ones as omp.h numbers them
// (internal/predef), from 1024 those made at run time, with a generation
// above the low 16 bits so that a handle kept past omp_destroy_allocator
// names nothing. It is the Handle of the internal/handles.Head every
// alloc.Allocator starts with (alloc fails to build if the head is not at
// offset 0), so Handle is a field read and Lookup an index into the
// published table, as kmp's inlined omp_alloc does.
package ompglue

import (
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/handles"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/predef"
)

// Handle returns a's omp.h handle.
func Handle(a *alloc.Allocator) uintptr { return head(a).Handle }

// head is the handles.Head a starts with.
func head(a *alloc.Allocator) *handles.Head { return (*handles.Head)(unsafe.Pointer(a)) }

// Lookup returns the live allocator with handle h: the default allocator
// for the null handle; false for a handle that names no live allocator (a
// stale one included).
func Lookup(h uintptr) (*alloc.Allocator, bool) {
	if e := handles.Live(h); e != nil {
		return (*alloc.Allocator)(e), true
	}
	// The null handle, and any handle before alloc made its predefined
	// allocators (the first call of alloc.Default makes them).
	def := alloc.Default()
	if h == predef.Null {
		return def, true
	}
	if e := handles.Live(h); e != nil {
		return (*alloc.Allocator)(e), true
	}
	return nil, false
}

// Name names handle h as every message of ompalloc does: the live
// allocator's name ("omp_default_mem_alloc",
// "allocator#1025(omp_default_mem_space, pinned)"), or, for a handle that
// names no live allocator, "allocator#1025" (and "omp_null_allocator" for
// 0).
func Name(h uintptr) string {
	if h != predef.Null {
		if a, ok := Lookup(h); ok {
			return a.String()
		}
	}
	return predef.Name(h)
}

// Realloc is omp_realloc with omp_null_allocator: it resizes the block at
// p into the allocator that served it (omp_default_mem_alloc when that one
// was destroyed), as alloc's Allocator.Realloc does into its own. p nil
// allocates from the default allocator; size 0 frees p. A p that is no
// live block is refused as Allocator.Realloc refuses it, p untouched.
func Realloc(p unsafe.Pointer, size uintptr) (unsafe.Pointer, error) {
	a := alloc.Default()
	if p != nil && size != 0 {
		if info, err := alloc.Inspect(p); err == nil && !head(info.Allocator).Destroyed.Load() {
			a = info.Allocator
		}
	}
	return a.Realloc(p, size)
}

// Containing finds the live heap block that holds address p, at its start
// or anywhere inside its requested size: its start and size. ok is false
// for an address no allocator's heap handed out (target memory spaces
// included), free memory, or padding past a block's size. The answer is a
// snapshot: a racing free makes it stale, never a fault.
func Containing(p unsafe.Pointer) (start unsafe.Pointer, size uintptr, ok bool) {
	s, n, ok := heap.Containing(uintptr(p))
	if !ok {
		return nil, 0, false
	}
	return cmem.Ptr(s), n, true
}
