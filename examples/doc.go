// Package examples holds runnable programs, one per directory, each
// explained at the top of its main.go and run with
//
//	go run ./examples/NAME
//
// The programs:
//
//   - pinned: an allocator with pinned=true, alignment and a pool, and its
//     fallbacks; VmLck before and after (Linux)
//   - lockmem: locking a user buffer for a device, nested sub-ranges, a
//     refused partial overlap, and what the errors look like
//   - tensor: typed slices from a pinned allocator copied to the default
//     device and back, with a staged small copy, and a clean release
//   - envalloc: OMP_ALLOCATOR choosing the default allocator
//   - transfer: a host→device→host round trip on the default device
//
// Each exits 0 on a machine without GPUs (the host device stands in);
// examples_test.go builds and runs them all.
package examples
