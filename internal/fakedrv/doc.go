// Package fakedrv builds the test-only fake GPU driver libraries kept in its
// testdata directory (fakecuda.c, fakehsa.c) into shared objects, once per
// test binary, so that tests of any package can load them in place of the
// real drivers. It is imported by tests only; it needs gcc at test time and
// skips the calling test, with a reason, when gcc is absent.
package fakedrv
