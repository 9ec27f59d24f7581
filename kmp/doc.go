// Package kmp mirrors LLVM's omp.h memory-management API one to one, so C
// code ports line by line and its behaviour can be compared with libomp:
// same handle numbers, same trait keys and values, same nil and
// omp_null_allocator results on failure. Bad input never aborts: it gives
// nil (or nothing) and one warning line on stderr naming the call and what
// was wrong.
//
// For the idiomatic Go API with errors, use package alloc; both share one
// engine, and a handle from InitAllocator works with alloc.Lookup.
package kmp
