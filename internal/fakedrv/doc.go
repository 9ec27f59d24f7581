// Package fakedrv builds the test-only fake GPU driver libraries kept in its
// testdata directory (fakecuda.c, fakehsa.c) into shared objects, so that
// tests of any package can load them in place of the real drivers.
//
// The sources are embedded in every test binary that imports the package,
// so a test binary copied to another machine needs no source tree. A library
// is compiled at most once per test binary, with $CC (default gcc; leading
// flags allowed, as for go build), into a cache in the OS temp directory
// keyed by its source and compiler. The calling test is skipped, with a
// reason, when there is no compiler or when the one found builds for another
// architecture than the test binary (an arm64 binary under qemu needs
// CC=aarch64-linux-gnu-gcc).
package fakedrv
