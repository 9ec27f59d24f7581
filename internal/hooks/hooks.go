// Package hooks is plumbing between this module's packages that users must
// not call: functions a lower package needs from a higher one, set by the
// higher one's init.
package hooks

import "sync/atomic"

// HugeTLBRange is one hugetlb mapping of a pinned heap.
type HugeTLBRange struct {
	Start, Size uintptr
	Device      int // the device its pinned pool locks for
}

// HugeTLBRanges lists the pinned heaps' hugetlb mappings in address order
// (set by alloc). The kernel does not count them in VmLck although they
// are locked and registered; internal/leakcheck leaves them out of its
// VmLck sum.
var HugeTLBRanges = func() []HugeTLBRange { return nil }

// Set by target, used by alloc (a pinned heap holds its chunks through a
// device; the stream-ordered free asks the queues).
var (
	// BeforeShutdown registers f to run at the start of every
	// target.Shutdown, before it checks for held memory.
	BeforeShutdown = func(f func()) {}
	// HoldMem page-locks [p, p+n) for device dev with a reference only
	// ReleaseMem drops (pinreg.Registry.Hold); errors name owner.
	HoldMem func(dev int, p, n uintptr, owner string) (uintptr, error)
	// ReleaseMem unlocks what HoldMem locked at p on device dev, dropping
	// the LockMem and mapped references inside it and reporting them.
	ReleaseMem func(dev int, p uintptr) (locks, mapped int, err error)
	// FreeAfterUse runs free once every queued copy using [p, p+n) has
	// completed and reports true, or reports false when none is in flight.
	FreeAfterUse func(p, n uintptr, free func()) bool
	// DeviceImpl returns device dev's plugin.Impl, for tests that ask a
	// fake driver about itself.
	DeviceImpl func(dev int) any
	// DeviceMemory returns the device-memory figures of the accelerators
	// opened so far, for memprof's expvar; it discovers and opens nothing.
	DeviceMemory = func() any { return []any{} }
)

// FreeChecks counts the reasons alloc's free must look beyond the heap:
// frees waiting for a queue (FreeAfter), leak-check mode, sampled blocks
// of the heap profile still live (memsample), and each pending host range
// that HostUses counts (target adds to both). Each
// reason adds 1 before it holds and takes it back once it stopped, so that
// a free that follows the start of any of them sees it: one atomic load for
// all of them on every free.
var FreeChecks atomic.Int64

// HostUses counts the pending host ranges of all target queues: while it
// is 0, a free need not ask FreeAfterUse. Each range counts in FreeChecks
// too, so that a free loads only FreeChecks while none is pending.
var HostUses atomic.Int64

// AllocChecks counts the reasons an allocation must take alloc's general
// path rather than the heap's hot path (heap.AllocEntry): leak-check mode,
// which records each block's stack. Added to before the reason holds, like
// FreeChecks: one atomic load on every allocation.
var AllocChecks atomic.Int64
