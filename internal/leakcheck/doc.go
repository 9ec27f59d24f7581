// Package leakcheck is the end-of-run leak check that the test binaries of
// alloc, kmp and internal/reliability run from their TestMain: after all
// tests pass it fails the run if any block is still allocated, pinned bytes
// are still counted after a trim, any device's registry still holds an
// entry, a staging buffer is still held by a queue, or VmLck (linux) stayed
// above where it started. With OMPALLOC_LEAKCHECK=1 the message lists the
// stack that allocated each leaked block.
package leakcheck
