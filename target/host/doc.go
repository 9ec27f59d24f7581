// Package host is the plugin of the host device: the initial device of
// OpenMP, always present, numbered after every accelerator.
//
// Its "device" memory is host memory, and locking means what it says: the
// page-rounded range is mlock'ed (LLVM's host plugin locks nothing). Two
// locked ranges may share a page, so locks are counted per page: a page is
// mlock'ed when its count goes from 0 to 1 and munlock'ed when it returns to
// 0, never earlier. A failing mlock returns an error that names
// RLIMIT_MEMLOCK and its current value and matches ErrLockLimit.
//
// Copies in every direction are memmoves, and a queue of the host device
// runs its work at once: Query always reports done.
package host
