// Package hooks holds the counter that internal/heap's free path reads on
// every free, and that packages above it (alloc, internal/memsample,
// internal/device) move: the one atomic load that says "look beyond the
// heap". They live here, below the heap, because the heap
// must not import the packages that set them.
//
// It holds data only, never a function variable: a call between this
// module's packages is a plain call (the device core, internal/device, is
// imported directly), so that go-to-definition follows it.
// TestNoHiddenCallPaths (internal/apisurface) keeps it so.
package hooks

import "sync/atomic"

// FreeChecks counts the reasons alloc's free must look beyond the heap:
// frees waiting for a queue (FreeAfter), leak-check mode, sampled blocks
// of the heap profile still live (memsample), and each pending host range
// of a queued copy (internal/device.HostUseAdded). Each reason adds 1
// before it holds and takes it back once it stopped, so that a free that
// follows the start of any of them sees it: one atomic load for all of
// them on every free.
var FreeChecks atomic.Int64

// The allocation side has no such counter: its one reason (leak-check
// mode, whose stacks the general path records) gates each allocator's
// hot-path descriptor instead (heap.Fast.Gate), in the size limit the hot
// path compares anyway.
