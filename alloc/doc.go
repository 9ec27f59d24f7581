// Package alloc is the idiomatic Go API of ompalloc: allocators with
// OpenMP traits on memory spaces, handing out memory that is not the Go
// heap (stable pointers, safe to pass to C and GPU drivers, never moved or
// scanned by the garbage collector).
//
//	a, err := alloc.New(memspace.Default, alloc.WithAlignment(64), alloc.WithPinned(true))
//	xs, err := alloc.Make[float32](a, 1<<20)
//	defer alloc.FreeSlice(a, xs)
//
// Every allocator, predefined or made here, has a Handle: the
// omp_allocator_handle_t that package kmp hands to C-style code. Both APIs
// share one engine (internal/heap): blocks from every unpinned host
// allocator live in one heap, pinned blocks in one locked heap per device,
// and a 16-byte header before each small block names its allocator, so Free
// needs no allocator and rejects pointers it never returned.
//
// Traits behave as OpenMP 5.2 says (see package traits for validation):
// alignment = max(trait, argument, 16); pool_size is a quota on footprint
// (size + header + padding); when an allocation cannot be served the
// fallback trait decides — null_fb returns an error, abort_fb panics,
// default_mem_fb retries on omp_default_mem_alloc, allocator_fb on fb_data.
// Unlike LLVM, every failure (quota, out of memory, failed pin) honours
// every fallback, and pinned=false pins nothing.
//
// The default allocator is process-wide (OpenMP has one per thread; Go has
// no thread identity to hang it on). OMP_ALLOCATOR is read at first use.
//
// Memory spaces: default, large_cap, const, high_bw and low_lat are all
// backed by ordinary host memory on hosts without special memory (see
// package memspace). The target memory spaces allocate from the default
// device's plugin, one driver call per block.
package alloc
