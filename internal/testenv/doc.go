// Package testenv keeps the user's OpenMP and ompalloc settings out of the
// tests. The library reads OMP_ALLOCATOR, OMP_DEFAULT_DEVICE,
// OMPALLOC_PINNED_LIMIT, OMPALLOC_HUGEPAGES, the staging sizes and
// LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS once, at first use, so a t.Setenv in
// a test comes too late once any earlier test touched the allocator: a
// test binary calls Neutralize from TestMain, before any test runs, and the
// tests then see the library's defaults whatever the shell that started
// them exports (issue 19: OMPALLOC_PINNED_LIMIT=0, the README's advice for
// GPU containers, failed alloc's tests). A test that wants a setting sets
// it itself, for a child process or with t.Setenv before the first use.
//
// Where the drivers are (OMPALLOC_CUDA_LIBRARY, OMPALLOC_HSA_LIBRARY) and
// the tests' own switches (OMPALLOC_REAL_*, OMPALLOC_GPU_DRYRUN,
// OMPALLOC_LEAKCHECK, *_CHILD, OMPALLOC_TEST_*) are kept: they are facts
// of the machine or requests to the test run, and tests read them on
// purpose. OMPALLOC_DISABLE_* are removed: the tests that load a fake
// driver must get it.
//
// Test-only: imported by _test.go files alone.
package testenv
