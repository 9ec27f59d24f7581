// Package kmp mirrors LLVM's omp.h memory-management API one to one, so C
// code ports line by line and its behaviour can be compared with libomp:
// same handle numbers, same trait keys and values, same nil and
// omp_null_allocator results on failure. Bad input never aborts: it gives
// nil (or nothing) and one warning line on stderr naming the call and what
// was wrong.
//
// Beyond LLVM it has the OpenMP 6.0 memory routines (omp6*.go): the
// partitioner trait and omp_init_mempartitioner and friends,
// omp_get_memspace_pagesize, omp_target_memset[_async],
// omp_target_memcpy_async and omp_target_memcpy_rect[_async]. An _async
// routine returns a *Task; the depend objects it waits for are earlier
// Tasks, and Task.Wait returns what the synchronous routine would. Where
// LLVM and the 6.0 specification differ (null_fb is the default fallback on
// target memory spaces), this package follows the specification.
//
// For the idiomatic Go API with errors, use package alloc; both share one
// engine, and a handle from InitAllocator works with alloc.Lookup.
package kmp
