package alloc

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/hooks"
	"github.com/ompalloc/ompalloc/target"
)

// Stream-ordered release. A block an asynchronous copy on a target.Queue
// reads or writes must not be handed out again before that copy completed,
// even when the program frees it right after submitting (the hazard
// PyTorch's record_stream and CuPy's pinned pool guard against). Free asks
// target whether a pinned copy in flight overlaps the block, and if so the
// free waits on those queues, in the same pending list that recycles their
// staging buffers; FreeAfter does the same for work the runtime cannot see
// (a kernel reading the block, say), as cuMemFreeAsync does.

// deferred holds the blocks whose free waits for a queue, so that a second
// Free of one is a double free rather than a second deferred free;
// deferredFrees is its size, read without the lock by Free.
var (
	deferredMu    sync.Mutex
	deferred      = map[uintptr]struct{}{}
	deferredFrees atomic.Int64
)

// FreeAfter frees p once all work issued on q so far has completed: the
// stream-ordered free of cuMemFreeAsync (cudaFreeAsync), what PyTorch's
// record_stream arranges. p may be read or written by anything ordered on q
// until then, and must not be used by the program after FreeAfter. The block
// stays allocated, and counted in the statistics, until it is freed. The
// free happens at the q.Synchronize, q.Query or q.Close that finds the work
// done, or before FreeAfter returns when it already is. nil is a no-op; a
// pointer this runtime did not return, or one already freed or waiting to
// be, is an error and changes nothing. Once q has taken the free, FreeAfter
// returns nil, even when the driver fails the query that would have freed
// the block at once: the free stays queued (the next Synchronize reports
// the driver's error), so an error always means the block is still the
// caller's, and nil that it is the queue's.
func FreeAfter(p unsafe.Pointer, q *target.Queue) error {
	if p == nil {
		return nil
	}
	if q == nil {
		return fmt.Errorf("FreeAfter(%p): %w: a nil queue", p, ErrInvalidArgument)
	}
	if _, err := inspectLive("FreeAfter", p); err != nil {
		return err
	}
	if !markDeferred(p) {
		return fmt.Errorf("FreeAfter(%p): %w: its free already waits for a queue", p, ErrDoubleFree)
	}
	if err := q.OnDone(func() { completeDeferred(p) }); err != nil {
		unmarkDeferred(p)
		return fmt.Errorf("FreeAfter(%p): %w: %w", p, ErrDevice, err)
	}
	return nil
}

// FreeSliceAfter is FreeAfter for a slice Make (or Resize) returned: it
// frees s once all work issued on q so far has completed, with no
// unsafe.Pointer in the caller's code. The slice may be re-sliced shorter
// but must start where Make's did (FreeSlice's checks); an empty slice is a
// no-op. s must not be used after the call.
func FreeSliceAfter[T any](s []T, q *target.Queue) error {
	if cap(s) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	what := "FreeSliceAfter[" + typeName[T]() + "]"
	if _, err := inspectSlice(p, what); err != nil {
		return err
	}
	return FreeAfter(p, q)
}

// freeAfterUse is Free's slow path while copies are in flight: a block that
// a queued copy reads or writes is freed once those copies completed.
// deferred false: free it now.
func freeAfterUse(p unsafe.Pointer) (deferred bool, err error) {
	if isDeferred(p) {
		return true, fmt.Errorf("Free(%p): %w: its free already waits for a queue", p, ErrDoubleFree)
	}
	b, err := heap.Inspect(uintptr(p))
	if err != nil {
		return false, nil // not a live heap block: freeNow says what it is
	}
	if !markDeferred(p) {
		return true, fmt.Errorf("Free(%p): %w: its free already waits for a queue", p, ErrDoubleFree)
	}
	if device.FreeAfterUse(uintptr(p), b.Size, func() { completeDeferred(p) }) {
		return true, nil
	}
	unmarkDeferred(p)
	return false, nil
}

// inspectLive checks that p is a live block, with Free's errors.
// op names the caller for the errors ("FreeAfter").
func inspectLive(op string, p unsafe.Pointer) (heap.Block, error) {
	b, err := heap.Inspect(uintptr(p))
	switch {
	case err == nil:
		if isDeferred(p) {
			return b, fmt.Errorf("%s(%p): %w: its free already waits for a queue", op, p, ErrDoubleFree)
		}
		return b, nil
	case errors.Is(err, heap.ErrForeign) && isTarget(p):
		return b, fmt.Errorf("%s(%p): %w: target memory: free it with Free", op, p, ErrNotSupported)
	}
	return b, opPointerError(op, p, err)
}

func markDeferred(p unsafe.Pointer) bool {
	deferredMu.Lock()
	defer deferredMu.Unlock()
	if _, ok := deferred[uintptr(p)]; ok {
		return false
	}
	deferred[uintptr(p)] = struct{}{}
	hooks.FreeChecks.Add(1) // before the count: see FreeChecks
	deferredFrees.Add(1)
	return true
}

func unmarkDeferred(p unsafe.Pointer) {
	deferredMu.Lock()
	defer deferredMu.Unlock()
	if _, ok := deferred[uintptr(p)]; ok {
		delete(deferred, uintptr(p))
		deferredFrees.Add(-1)
		hooks.FreeChecks.Add(-1)
	}
}

func isDeferred(p unsafe.Pointer) bool {
	if deferredFrees.Load() == 0 {
		return false
	}
	deferredMu.Lock()
	defer deferredMu.Unlock()
	_, ok := deferred[uintptr(p)]
	return ok
}

// completeDeferred frees p now that no queue uses it. The block was live
// and only this runtime could free it since: freeNow cannot fail but for a
// heap defect, which is counted rather than lost.
func completeDeferred(p unsafe.Pointer) {
	unmarkDeferred(p)
	if err := freeNow(p); err != nil {
		deferredFailures.Add(1)
	}
}

// deferredFailures counts deferred frees that failed (never, but a failure
// must not vanish without a trace).
var deferredFailures atomic.Int64
