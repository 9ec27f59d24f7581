// Package fault is the runtime's fault-injection hook: named points on the
// slow paths (chunk acquisition from libc, page-locking a chunk) where a
// test can make the next, the Nth or every call fail, to check that the
// fallback traits are obeyed and nothing leaks when the system says no.
//
// It is off by default and costs one atomic load when off: Check reads a
// package-level flag that only Arm sets. The points sit where memory is
// obtained in 4 MiB chunks, never on the per-allocation path.
//
// Points in the runtime:
//
//	heap.acquire  internal/heap MapSource.Acquire: mapping a chunk or huge region
//	pin.map       alloc's pinned source, before mapping a chunk to lock
//	pin.lock      alloc's pinned source, before locking the chunk through the device
//
// Driver calls are faulted by the fake drivers' own environment variables
// (FAKECUDA_FAIL, FAKEHSA_FAIL; see internal/fakedrv).
package fault
