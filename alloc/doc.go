// Package alloc is the idiomatic Go API of ompalloc: allocators with
// OpenMP traits on memory spaces, handing out memory that is not the Go
// heap (stable pointers, safe to pass to C and GPU drivers, never moved or
// scanned by the garbage collector).
//
// # Using it
//
// Make an allocator, pinned (page-locked) if the memory goes to a GPU, take
// typed slices from it, free them, and read its counters:
//
//	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithAlignment(64))
//	if err != nil { ... }
//	defer a.Destroy()
//	xs, err := alloc.Make[float32](a, 1<<20) // zeroed, len == cap
//	if err != nil { ... }
//	defer alloc.FreeSlice(a, xs)
//	fmt.Println(a.Stats().BytesLive, a.Stats().PinnedBytes)
//
// Slices: Make returns a zeroed []T of plain-data T; FreeSlice frees it
// (and refuses a slice re-sliced from further in, grown by append, or from
// another allocator); Resize grows or shrinks it, where it lies when the
// block has room; InspectSlice says whose it is and its size (whether it is
// pinned is target.IsPinned's answer, the one question for every way to
// pin). NewBuffer wraps a slice with a warning if it is dropped unfreed.
//
// Byte buffers for libraries that take an allocator: NewArrowAllocator
// returns an ArrowAllocator, a value with the method set of Apache Arrow Go's memory.Allocator (Allocate,
// Reallocate, Free), so Arrow builders, readers and kernels allocate in
// ompalloc memory without either module importing the other. gonum
// (mat.NewDense over a Make[float64] slice) and gorgonia
// (tensor.WithBacking) take slices from Make directly; the README shows
// all three.
//
// Raw memory: Alloc, Calloc, AlignedAlloc, Realloc and Free work on
// unsafe.Pointer as omp_alloc and friends do, and Inspect describes a
// block.
//
// Pinned memory has three doors, one per job: a pinned allocator
// (WithPinned) allocates it; target.Pin pins a slice the program already
// has; target.Device.LockMem pins C memory (kmp.TargetLockMem is its omp.h
// mirror). target.IsPinned answers for all three. ReadPinnedStats reports
// the pinned pools, and Trim gives their idle memory back.
//
// Errors are wrapped sentinels: test them with errors.Is (ErrPoolExhausted,
// ErrPinFailed, ErrOutOfMemory, ErrInvalidPointer, ErrDoubleFree, ...).
//
// # How it works
//
// Every allocator, predefined or made here, has a handle: the
// omp_allocator_handle_t that package kmp hands to C-style code. Both APIs
// share one engine (internal/heap): blocks from every unpinned host
// allocator live in one heap, pinned blocks in one locked heap per device,
// and an 8-byte header before each small block names its allocator, so Free
// needs no allocator and rejects pointers it never returned.
//
// Traits behave as OpenMP 5.2 says (see package traits for validation):
// alignment = max(trait, argument, 16); pool_size is a quota on footprint
// (size + header + padding: what Stats' FootprintLive counts, charged at
// allocation, credited at Free, unchanged by a resize in place); when an allocation cannot be served the
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
// package memspace); high_bw and large_cap bind their chunks to HBM or
// capacity (CXL) NUMA nodes where the machine has them. With the default
// partition, a space of several such nodes (HBM on each socket) serves each
// thread from the node of the space nearest to it, as partition=nearest
// does (a heap per node); blocked and interleaved spread over all of them.
// A pinned allocator on such a space locks memory bound to the space's
// nodes too (its device's pool for those nodes, PinnedPoolStats.Bound); a chunk
// that cannot be had there fails (ErrPlacement, or the lock's error) and
// the fallback trait decides: never DDR in silence. The partition trait
// reaches the kernel through mbind(2) on each chunk (see Allocator.Placement). The target memory spaces allocate from the default
// device's plugin, one driver call per block.
//
// # Environment
//
// OMP_ALLOCATOR (OpenMP 5.1 syntax; see package traits) sets the default
// allocator at first use; a bad value warns once and keeps
// omp_default_mem_alloc. OMPALLOC_PINNED_LIMIT overrides the limit on
// pinned bytes ("0": none; sizes take K, M, G suffixes; SetPinnedLimit;
// ReadPinnedStats reports the limit and what it counts).
// OMPALLOC_HUGEPAGES chooses the pages of pinned chunks and huge regions:
// thp (the default), off or hugetlb (SetHugePages; ReadPinnedStats reports
// the mode). OMPALLOC_LEAKCHECK=1 turns leak-check mode on (SetLeakCheck,
// which returns the previous setting): every block allocated from then on
// records the stack that allocated it, which LiveBlocks reports with the
// blocks; it costs a stack capture per allocation, and one atomic load when
// off.
package alloc
