// Package hooks holds the counters that internal/heap's fast paths read on
// every allocation and free, and that packages above it (alloc,
// internal/memsample, internal/device) move: the one atomic load that says
// "look beyond the heap". They live here, below the heap, because the heap
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

// AllocChecks counts the reasons an allocation must take alloc's general
// path rather than the heap's hot path (heap.AllocEntry): leak-check mode,
// which records each block's stack. Added to before the reason holds, like
// FreeChecks: one atomic load on every allocation.
var AllocChecks atomic.Int64
