package target

import (
	"math/bits"
	"sync"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// StagingConfig sets a device's pinned staging pool. A device starts with
// Threshold 64 KiB (the sizes where a driver's own pageable path costs most
// relative to the copy) and MaxPoolBytes 4 MiB, unless
// OMPALLOC_STAGING_THRESHOLD or OMPALLOC_STAGING_POOL say otherwise;
// Device.StagingConfig returns what a device has, to set it back after a
// change.
type StagingConfig struct {
	// Threshold is the largest host→device copy from pageable memory that is
	// staged through a pinned buffer. 0 turns staging off.
	Threshold uintptr
	// MaxPoolBytes bounds the bytes of free buffers a device's pool keeps;
	// a buffer returned to a full pool is freed.
	MaxPoolBytes uintptr
}

// defaultStagingConfig returns the configuration a device starts with
// unless the environment says otherwise (StagingConfig's doc gives it). A
// function, not a variable, so that nothing can change every later
// device's defaults behind the environment's back.
func defaultStagingConfig() StagingConfig {
	return StagingConfig{Threshold: 64 << 10, MaxPoolBytes: 4 << 20}
}

// StagingStats counts what a device's staging pool did.
type StagingStats struct {
	Hits          uint64  // buffers taken from the pool
	Misses        uint64  // buffers newly allocated
	Unstaged      uint64  // small copies sent unstaged: no pinned buffer could be had
	Recycled      uint64  // buffers queues returned to the pool
	Freed         uint64  // buffers freed (pool full, threshold lowered, shutdown)
	Buffers       int     // live buffers, free or in use
	PoolBytes     uintptr // bytes of free buffers in the pool
	InUseBytes    uintptr // bytes of buffers being filled or held by queues
	AllocFailures uint64  // pinned allocations that failed
}

// minStagingClass is the smallest buffer: 256 bytes.
const minStagingShift = 8

// stagingBuf is a pinned host buffer of one size class.
type stagingBuf struct {
	p    uintptr
	size uintptr // a power of two
}

// stagingPool keeps pinned buffers of power-of-two sizes for one device.
// A buffer is free in the pool, then filled by a submission, then in flight
// on a queue, then recycled into the pool (or freed when the pool is full),
// and every buffer still alive is freed by close.
type stagingPool struct {
	impl plugin.Impl

	mu     sync.Mutex
	cfg    StagingConfig
	free   [bits.UintSize][]uintptr // by log2 of the size
	live   map[uintptr]uintptr      // every buffer alive → its size
	closed bool
	stats  StagingStats
}

func newStagingPool(impl plugin.Impl, cfg StagingConfig) *stagingPool {
	return &stagingPool{impl: impl, cfg: cfg, live: map[uintptr]uintptr{}}
}

// largestClass is the size of the buffers that hold Threshold bytes: the
// largest the pool keeps (0 when staging is off).
func (c StagingConfig) largestClass() uintptr {
	if c.Threshold == 0 {
		return 0
	}
	return 1 << classOf(c.Threshold)
}

// classOf returns the log2 of the buffer size that holds n bytes.
func classOf(n uintptr) int {
	return max(bits.Len(uint(n-1)), minStagingShift)
}

// threshold returns the largest size staged now (0: staging off).
func (sp *stagingPool) threshold() uintptr {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return 0
	}
	return sp.cfg.Threshold
}

// take returns a free buffer of at least n bytes from the pool, if one is
// there.
func (sp *stagingPool) take(n uintptr) (stagingBuf, bool) {
	c := classOf(n)
	size := uintptr(1) << c
	sp.mu.Lock()
	defer sp.mu.Unlock()
	l := len(sp.free[c])
	if sp.closed || l == 0 {
		return stagingBuf{}, false
	}
	p := sp.free[c][l-1]
	sp.free[c] = sp.free[c][:l-1]
	sp.stats.Hits++
	sp.stats.PoolBytes -= size
	sp.stats.InUseBytes += size
	return stagingBuf{p, size}, true
}

// alloc allocates a new pinned buffer of at least n bytes; ok is false when
// none can be had (staging is then skipped).
func (sp *stagingPool) alloc(n uintptr) (stagingBuf, bool) {
	size := uintptr(1) << classOf(n)
	// Allocate outside the lock: pinning takes a driver call (microseconds).
	p, err := sp.impl.Alloc(MemHost, size)

	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err != nil || p == 0 {
		sp.stats.AllocFailures++
		sp.stats.Unstaged++
		return stagingBuf{}, false
	}
	if sp.closed { // shut down while allocating
		sp.mu.Unlock()
		sp.freeAll([]uintptr{p})
		sp.mu.Lock() // for the deferred unlock
		return stagingBuf{}, false
	}
	sp.stats.Misses++
	sp.stats.Buffers++
	sp.stats.InUseBytes += size
	sp.live[p] = size
	return stagingBuf{p, size}, true
}

// put returns a buffer no copy reads any more. recycled says a queue
// returned it (for the stats).
func (sp *stagingPool) put(b stagingBuf, recycled bool) {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		return // close freed it
	}
	sp.stats.InUseBytes -= b.size
	if recycled {
		sp.stats.Recycled++
	}
	if b.size <= sp.cfg.largestClass() && sp.stats.PoolBytes+b.size <= sp.cfg.MaxPoolBytes {
		c := classOf(b.size)
		sp.free[c] = append(sp.free[c], b.p)
		sp.stats.PoolBytes += b.size
		sp.mu.Unlock()
		return
	}
	sp.forgetLocked(b.p)
	sp.mu.Unlock()
	sp.freeAll([]uintptr{b.p})
}

// forgetLocked takes buffer p out of the pool's books; the caller frees it
// with freeAll once sp.mu is released.
func (sp *stagingPool) forgetLocked(p uintptr) {
	delete(sp.live, p)
	sp.stats.Buffers--
	sp.stats.Freed++
}

// freeAll frees buffers the pool forgot, without sp.mu: freeing pinned
// memory synchronizes with the device (cuMemFreeHost waits for the work in
// flight), and a submission taking a cached buffer must not wait for that.
func (sp *stagingPool) freeAll(ps []uintptr) {
	for _, p := range ps {
		_ = sp.impl.Free(MemHost, p)
	}
}

// setConfig changes the limits and frees the free buffers that no longer fit.
func (sp *stagingPool) setConfig(cfg StagingConfig) {
	sp.mu.Lock()
	sp.cfg = cfg
	if sp.closed {
		sp.mu.Unlock()
		return
	}
	var gone []uintptr
	for c := len(sp.free) - 1; c >= 0; c-- {
		size := uintptr(1) << c
		for len(sp.free[c]) > 0 && (size > cfg.largestClass() || sp.stats.PoolBytes > cfg.MaxPoolBytes) {
			l := len(sp.free[c])
			sp.forgetLocked(sp.free[c][l-1])
			gone = append(gone, sp.free[c][l-1])
			sp.free[c] = sp.free[c][:l-1]
			sp.stats.PoolBytes -= size
		}
	}
	sp.mu.Unlock()
	sp.freeAll(gone)
}

func (sp *stagingPool) config() StagingConfig {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.cfg
}

func (sp *stagingPool) snapshot() StagingStats {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.stats
}

// close frees every buffer alive, in the pool or not. The caller has
// destroyed the queues first, so no copy reads them any more.
func (sp *stagingPool) close() {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		return
	}
	gone := make([]uintptr, 0, len(sp.live))
	for p := range sp.live {
		sp.forgetLocked(p)
		gone = append(gone, p)
	}
	clear(sp.free[:])
	sp.stats.PoolBytes, sp.stats.InUseBytes = 0, 0
	sp.closed = true
	sp.mu.Unlock()
	sp.freeAll(gone)
}
