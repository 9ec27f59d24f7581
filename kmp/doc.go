// Package kmp mirrors LLVM's omp.h memory-management API one to one, so C
// code ports line by line and its behaviour can be compared with libomp:
// same handle numbers, same trait keys and values, same nil and
// omp_null_allocator results on failure.
//
// # Using it
//
// Make an allocator from traits (omp_init_allocator), allocate from it,
// free, destroy:
//
//	h := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{
//		{Key: kmp.AtkPinned, Value: kmp.AtvTrue},
//		{Key: kmp.AtkAlignment, Value: 64},
//	})
//	defer kmp.DestroyAllocator(h) // deferred first, runs last
//	p := kmp.Alloc(1<<20, h)      // nil on failure, as omp_alloc
//	defer kmp.Free(p, h)          // runs before DestroyAllocator
//
// Device memory and copies: TargetAlloc, TargetMemcpy (the initial device,
// GetInitialDevice, is the host on every machine; every routine that takes
// a device number accepts OpenMP 5.2's InitialDevice, omp_initial_device,
// for it, and reports InvalidDevice, omp_invalid_device, as the runtime
// error OpenMP makes it: a warning and the failure result). The device data
// environment: TargetAssociatePtr / TargetDisassociatePtr,
// TargetIsPresent, GetMappedPtr and TargetIsAccessible, with LLVM's
// answers (api.cpp). Page-locking memory you
// own for a device: TargetLockMem and TargetUnlockMem, LLVM's
// llvm_omp_target_lock_mem, reference-counted when nested. Bad input never
// aborts: it gives nil (or nothing, or -1) and one line on stderr,
// "ompalloc: warning: <call>: <what was wrong>", naming allocators as
// package alloc does (omp_default_mem_alloc, allocator#1024). The line
// goes through the module's warning hook: logging.SetLogger sends it to a
// *slog.Logger instead (kind bad_input), to count or silence it.
//
// For the idiomatic Go API with errors, typed slices (alloc.Make), an Arrow
// allocator (alloc.NewArrowAllocator) and statistics, use package alloc; both share one
// engine, so a block from either is freed by either.
//
// # OpenMP 6.0
//
// Beyond LLVM it has the OpenMP 6.0 memory routines (omp6*.go): the
// partitioner trait and omp_init_mempartitioner and friends,
// omp_get_memspace_pagesize, omp_target_memset[_async],
// omp_target_memcpy_async and omp_target_memcpy_rect[_async]. An _async
// routine returns a *Task; the depend objects it waits for are earlier
// Tasks, and Task.Wait returns what the synchronous routine would. Where
// LLVM and the 6.0 specification differ (null_fb is the default fallback on
// target memory spaces), this package follows the specification.
package kmp
