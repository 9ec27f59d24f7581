package alloc

import (
	"fmt"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/heap"
)

// reserve adds n to *used unless that would take it above max (0: no
// limit), and reports the count it found. A compare-and-swap loop rather
// than add-then-undo: the count never reads above max, not even for an
// instant, so two racing requests cannot both fail when one would fit.
func reserve(used *atomic.Int64, n, max int64) (was int64, ok bool) {
	for {
		was = used.Load()
		if max > 0 && was+n > max {
			return was, false
		}
		if used.CompareAndSwap(was, was+n) {
			return was, true
		}
	}
}

// reservePool charges foot bytes of a size-byte block to a's pool_size
// quota, if it has one.
func (a *Allocator) reservePool(size uintptr, foot int64) error {
	if a.traits.PoolSize == 0 {
		return nil
	}
	if used, ok := reserve(&a.poolUsed, foot, int64(a.traits.PoolSize)); !ok {
		return fmt.Errorf("%v: %w: %d bytes (%d with overhead) do not fit, %d of %d in use",
			a, ErrPoolExhausted, size, foot, used, a.traits.PoolSize)
	}
	return nil
}

func (a *Allocator) releasePool(n int64) { a.poolUsed.Add(-n) }

// settlePool makes a's pool_size charge for the block just allocated at p
// the figure every other path uses: its footprint f, what the heap says it
// occupies (FootprintLive counts the same), charged at allocation and
// credited at Free, unchanged by a resize in place (a block's slot, page run
// or region does not change there). foot was reserved from the prediction
// (heap.Footprint); a kept huge region may be up to a quarter larger. When
// the pool cannot take the difference, the block goes back and a region of
// its own size is asked for (heap.AllocFresh); if even that is too large
// (a pinned heap's regions round up), the allocation is refused with
// ErrPoolExhausted. It returns the block to use, its footprint, or an error
// with the block already freed.
func (a *Allocator) settlePool(p, f uintptr, size, align uintptr, foot int64, zero bool) (uintptr, uintptr, error) {
	for try := 0; ; try++ {
		d := int64(f) - foot
		if d <= 0 {
			a.releasePool(-d)
			return p, f, nil
		}
		if a.reservePool(size, d) == nil {
			return p, f, nil
		}
		h := heapOfBlock(p)
		a.unallocate(p)
		if try > 0 || h == nil {
			a.releasePool(foot)
			return 0, 0, a.poolRefusal(size, int64(f))
		}
		var err error
		if p, f, err = h.AllocFresh(size, align, a.id, zero, a.shards.t); err != nil {
			a.releasePool(foot)
			return 0, 0, a.heapError(err)
		}
	}
}

func heapOfBlock(p uintptr) *heap.Heap {
	b, err := heap.Inspect(p)
	if err != nil {
		return nil
	}
	return b.Heap
}

// unallocate gives back a block try has not handed out yet: the heap counts
// it out of a's tally; the quota is the caller's to settle.
func (a *Allocator) unallocate(p uintptr) { _, _, _ = heap.FreeCounted(p) }

// poolRefusal is ErrPoolExhausted for a block whose footprint foot does not
// fit what a's pool has left.
func (a *Allocator) poolRefusal(size uintptr, foot int64) error {
	return fmt.Errorf("%v: %w: %d bytes (%d with overhead) do not fit, %d of %d in use",
		a, ErrPoolExhausted, size, foot, a.poolUsed.Load(), a.traits.PoolSize)
}
