// Package fakedrv builds the test-only fake GPU driver libraries kept in its
// testdata directory (fakecuda.c, fakehsa.c) into shared objects, so that
// tests of any package can load them in place of the real drivers. A library
// is compiled with gcc at most once per test binary, into a cache in the OS
// temp directory keyed by its source; the calling test is skipped, with a
// reason, when gcc is absent.
package fakedrv
