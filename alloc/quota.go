package alloc

import (
	"fmt"
	"sync"
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

// poolCharges records what the quota was charged for blocks whose footprint
// is not the one Footprint predicted: a reused huge region may be up to a
// quarter larger than the block needs. The quota is charged what the block
// needs, as libomp charges it, never more than asked: adding the region's
// extra bytes could take the count above pool_size.
var poolCharges sync.Map // block address → charged bytes (int64)

// poolCharged settles the charge of the block at p: foot was reserved, f is
// its real footprint.
func (a *Allocator) poolCharged(p uintptr, foot, f int64) {
	if f < foot {
		a.releasePool(foot - f) // charged f, which Free takes back
		return
	}
	poolCharges.Store(p, foot)
}

// poolCharge returns what the block at p with footprint foot was charged.
func poolCharge(p, foot uintptr) int64 {
	if foot > 2<<20 { // only huge regions are reused larger than asked
		if v, ok := poolCharges.LoadAndDelete(p); ok {
			return v.(int64)
		}
	}
	return int64(foot)
}

// rechargePool settles a's pool_size charge for the block at p (described
// by old before the change) now resized in place to size bytes. Only a huge
// block can need it: small and medium blocks are charged their whole slot
// or page run, which in-place growth never leaves. A block in a reused
// huge region is charged what it needs, less than the region; growing it
// into the region charges the growth, and a growth past the quota is
// refused (ErrPoolExhausted) with nothing changed. Shrinking gives back.
func (a *Allocator) rechargePool(p uintptr, old heap.Block, size uintptr) error {
	if a.traits.PoolSize == 0 || old.Footprint <= 2<<20 {
		return nil
	}
	charged := int64(old.Footprint)
	if v, ok := poolCharges.Load(p); ok {
		charged = v.(int64)
	}
	need := min(int64(heap.Footprint(size, a.align)), int64(old.Footprint))
	if d := need - charged; d > 0 {
		if err := a.reservePool(size, d); err != nil {
			return fmt.Errorf("%w (growing a block of %d bytes in place to %d, charged %d so far)", err, old.Size, size, charged)
		}
	} else if d < 0 {
		a.releasePool(-d)
	}
	if need == int64(old.Footprint) {
		poolCharges.Delete(p)
	} else {
		poolCharges.Store(p, need)
	}
	return nil
}
