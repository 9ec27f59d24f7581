package target

// A caching pool of device memory per device, as PyTorch's, CuPy's and
// RMM's allocators keep one: cudaMalloc/cudaFree (cuMemAlloc/cuMemFree)
// may synchronize the device, so freed blocks are kept and handed out
// again.
//
// Where the plugin offers the driver's own stream-ordered allocator
// (plugin.MemPooler: CUDA with CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
// the pool is that (cuMemAllocFromPoolAsync, cuMemFreeAsync, a release
// threshold, cuMemPoolTrimTo) and the driver keeps the ordering rule below;
// target keeps the books of what it handed out, the limit, and the list of
// queues a free without a queue waits for. Otherwise (older CUDA drivers,
// HSA) the pool is the size-class cache here, under the same rule:
//
//   - a block freed with a queue (PoolFree(p, q)) may be handed out again
//     at once to an allocation for that same queue (its later work runs
//     after the work issued before the free), and to any other user only
//     once q's work issued before the free has completed;
//   - a block freed without a queue may be handed out once the work issued
//     before the free on every open queue of the device has completed (the
//     wait cuMemFree does, done later and without blocking);
//   - a limit (SetPoolLimit, like pool_size) bounds the bytes reserved from
//     the driver; at the limit, ready free blocks are given back first;
//   - TrimPool gives ready free blocks back to the driver.

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/target/plugin"
)

// ErrPoolLimit: a pool allocation would take the device pool past its limit.
var ErrPoolLimit = errors.New("device pool limit reached")

// PoolStats describes a device's memory pool, as torch.cuda.memory_stats
// does: bytes reserved from the driver against bytes handed out.
//
// With the driver's pool (DriverPool), Reserved and InUse are the driver's
// own figures (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, USED_MEM_CURRENT, read
// when PoolStats is called), Allocs counts the allocations, and the fields
// of the size-class cache (FreeBlocks, Waiting, Hits, Misses, Released)
// stay zero: the driver does not say.
type PoolStats struct {
	Reserved   uintptr // bytes of device memory the pool holds (in use and free)
	InUse      uintptr // bytes of the blocks handed out (rounded to their size class)
	FreeBlocks int     // cached blocks, ready or waiting for their queue's work
	Waiting    int     // cached blocks not yet reusable by every queue
	Limit      uintptr // 0: no limit
	Hits       uint64  // allocations served from the cache
	Misses     uint64  // allocations that asked the driver
	Released   uint64  // blocks given back to the driver (trim, limit)
	DriverPool bool    // the driver's stream-ordered allocator serves the device
	Allocs     uint64  // allocations (hits and misses, or the driver pool's)
}

type poolBlock struct {
	p     uintptr
	size  uintptr
	q     *Queue       // freed after work on q: reusable at once for q
	ready *atomic.Bool // reusable by everyone
	waits []*Queue     // the queues whose work it waits for
}

type devPool struct {
	mu    sync.Mutex
	free  map[uintptr][]poolBlock // by class size, most recently freed last
	live  map[uintptr]uintptr     // handed-out block → class size (driver pool: bytes asked)
	st    PoolStats
	limit uintptr

	drvOnce sync.Once
	drv     plugin.MemPool // the driver's stream-ordered pool; nil: the size-class cache
	drvSet  bool           // drvOnce ran (read under mu)
}

// driverPool returns the plugin's stream-ordered pool of the open device d,
// asked once, or nil. The release threshold follows the limit.
func (d *Device) driverPool() plugin.MemPool {
	pl := d.devpool
	pl.drvOnce.Do(func() {
		mp, ok := d.impl.(plugin.MemPooler)
		var drv plugin.MemPool
		if ok {
			drv = mp.MemPool()
		}
		pl.mu.Lock()
		defer pl.mu.Unlock()
		pl.drvSet = true
		if drv == nil {
			return
		}
		pl.drv = drv
		if pl.limit != 0 {
			_ = drv.SetReleaseThreshold(uint64(pl.limit))
		}
	})
	return pl.drv
}

// knownDriverPoolLocked is the driver pool when PoolAlloc asked for it already
// (nil otherwise: then nothing was allocated from it); for the calls that
// must not open the device. Called with pl.mu held.
func (pl *devPool) knownDriverPoolLocked() plugin.MemPool {
	if !pl.drvSet {
		return nil
	}
	return pl.drv
}

func newDevPool() *devPool {
	return &devPool{free: map[uintptr][]poolBlock{}, live: map[uintptr]uintptr{}}
}

// poolClass rounds n up to its size class: 512 bytes at least, then four
// classes per doubling (at most 25% over the request).
func poolClass(n uintptr) uintptr {
	if n <= 512 {
		return 512
	}
	shift := bits.Len64(uint64(n-1)) - 3 // 2^(k-1) < n <= 2^k: steps of a quarter of 2^(k-1)
	step := uintptr(1) << shift
	return (n + step - 1) &^ (step - 1)
}

// poolAlloc is PoolAlloc (memstats.go) before the books.
func (d *Device) poolAlloc(n uintptr, q *Queue) (uintptr, error) {
	if err := d.usable(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("device %d: pool alloc of 0 bytes: %w", d.ID, ErrInvalidArgument)
	}
	if err := d.checkQueue(q); err != nil {
		return 0, err
	}
	if drv := d.driverPool(); drv != nil {
		return d.driverPoolAlloc(drv, n, q)
	}
	pl := d.devpool
	c := poolClass(n)
	for try := 0; ; try++ {
		pl.mu.Lock()
		if p, ok := pl.takeLocked(c, q); ok {
			pl.mu.Unlock()
			return p, nil
		}
		if try > 0 {
			break // pl.mu held
		}
		// Before asking the driver, see whether the queues the cached
		// blocks wait for are done: one query per queue, on a miss only.
		waits := pl.waitsLocked(c)
		pl.mu.Unlock()
		if len(waits) == 0 {
			pl.mu.Lock()
			break
		}
		for _, w := range waits {
			w.recycleIfDone()
		}
	}
	if pl.limit != 0 && pl.st.Reserved+c > pl.limit {
		pl.releaseLocked(d, pl.st.Reserved+c-pl.limit)
		if pl.st.Reserved+c > pl.limit {
			st := pl.st
			pl.mu.Unlock()
			return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w: %d of %d bytes reserved (%d in use)",
				d.ID, n, ErrPoolLimit, st.Reserved, pl.limit, st.InUse)
		}
	}
	pl.st.Reserved += c // reserved before the driver call, so that racing allocations respect the limit
	pl.st.Misses++
	pl.st.Allocs++
	pl.mu.Unlock()
	p, err := d.impl.Alloc(plugin.MemDevice, c)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if err != nil {
		pl.st.Reserved -= c
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w", d.ID, n, err)
	}
	pl.live[p] = c
	pl.st.InUse += c
	return p, nil
}

// takeLocked hands out a cached block of class c that q may use.
func (pl *devPool) takeLocked(c uintptr, q *Queue) (uintptr, bool) {
	list := pl.free[c]
	for i := len(list) - 1; i >= 0; i-- {
		b := list[i]
		if b.ready.Load() || (q != nil && b.q == q) {
			pl.free[c] = append(list[:i], list[i+1:]...)
			pl.live[b.p] = c
			pl.st.InUse += c
			pl.st.Hits++
			pl.st.Allocs++
			return b.p, true
		}
	}
	return 0, false
}

// waitsLocked lists the queues the waiting blocks of class c wait for.
func (pl *devPool) waitsLocked(c uintptr) []*Queue {
	seen := map[*Queue]bool{}
	var out []*Queue
	for _, b := range pl.free[c] {
		if b.ready.Load() {
			continue
		}
		for _, w := range b.waits {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

// poolFree is PoolFree (memstats.go) after the books.
func (d *Device) poolFree(p uintptr, q *Queue) error {
	if err := d.checkQueue(q); err != nil {
		return err
	}
	pl := d.devpool
	pl.mu.Lock()
	c, ok := pl.live[p]
	if !ok {
		pl.mu.Unlock()
		return fmt.Errorf("device %d: pool free of %#x: %w: not a live block of the device's pool", d.ID, p, ErrInvalidArgument)
	}
	if drv := pl.knownDriverPoolLocked(); drv != nil {
		delete(pl.live, p)
		pl.st.InUse -= c
		pl.mu.Unlock()
		return d.driverPoolFree(drv, p, c, q)
	}
	delete(pl.live, p)
	pl.st.InUse -= c
	var qs []*Queue
	if q != nil {
		qs = []*Queue{q}
	} else {
		d.qmu.Lock()
		for o := range d.queues {
			qs = append(qs, o)
		}
		d.qmu.Unlock()
	}
	ready := new(atomic.Bool)
	pl.free[c] = append(pl.free[c], poolBlock{p: p, size: c, q: q, ready: ready, waits: qs})
	pl.mu.Unlock()

	// Ready once every queue's work before now completed: a countdown with
	// one extra count held until all are asked.
	left := new(atomic.Int64)
	left.Store(1)
	done := func() {
		if left.Add(-1) == 0 {
			ready.Store(true)
		}
	}
	for _, o := range qs {
		left.Add(1)
		if o.after(done) != nil {
			done() // a closed queue: its work is done
		}
	}
	done()
	return nil
}

// PoolStats reports d's device-memory pool.
func (d *Device) PoolStats() PoolStats {
	pl := d.devpool
	pl.mu.Lock()
	drv := pl.knownDriverPoolLocked()
	st := pl.st
	st.Limit = pl.limit
	if drv != nil {
		pl.mu.Unlock()
		st.DriverPool = true
		if reserved, used, err := drv.Stats(); err == nil {
			st.Reserved, st.InUse = uintptr(reserved), uintptr(used)
		}
		return st
	}
	defer pl.mu.Unlock()
	for _, l := range pl.free {
		st.FreeBlocks += len(l)
		for _, b := range l {
			if !b.ready.Load() {
				st.Waiting++
			}
		}
	}
	return st
}

// SetPoolLimit bounds the bytes d's pool reserves from the driver (0: no
// bound), as the pool_size trait bounds an allocator; free blocks above it
// are given back now. With the driver's stream-ordered pool it bounds the
// bytes handed out (the driver reserves in its own granularity) and is the
// pool's release threshold: free memory above it also goes back at the
// driver's next synchronization.
func (d *Device) SetPoolLimit(n uintptr) {
	pl := d.devpool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.limit = n
	if drv := pl.knownDriverPoolLocked(); drv != nil {
		keep := ^uint64(0)
		if n != 0 {
			keep = uint64(n)
			_ = drv.Trim(n)
		}
		_ = drv.SetReleaseThreshold(keep)
		return
	}
	if n != 0 && pl.st.Reserved > n {
		pl.releaseLocked(d, pl.st.Reserved-n)
	}
}

// TrimPool gives the ready free blocks of d's pool back to the driver
// until at most keep bytes are reserved (cuMemPoolTrimTo, CuPy's
// free_all_blocks with keep 0), and returns the bytes released. Blocks
// whose queue's work is still running stay (with the driver's pool, also
// frees issued on a queue the host has not synchronized since).
func (d *Device) TrimPool(keep uintptr) uintptr {
	pl := d.devpool
	pl.mu.Lock()
	if drv := pl.knownDriverPoolLocked(); drv != nil {
		pl.mu.Unlock()
		return driverPoolTrim(drv, keep)
	}
	defer pl.mu.Unlock()
	if pl.st.Reserved <= keep {
		return 0
	}
	return pl.releaseLocked(d, pl.st.Reserved-keep)
}

// releaseLocked frees ready free blocks, largest class first, until want
// bytes are released or none is left; it returns the bytes released.
func (pl *devPool) releaseLocked(d *Device, want uintptr) uintptr {
	var got uintptr
	for got < want {
		var best uintptr
		for c, l := range pl.free {
			for _, b := range l {
				if b.ready.Load() && c > best {
					best = c
					break
				}
			}
		}
		if best == 0 {
			break
		}
		l := pl.free[best]
		for i, b := range l {
			if b.ready.Load() {
				if err := d.impl.Free(plugin.MemDevice, b.p); err != nil {
					return got // kept cached; a later trim retries
				}
				pl.free[best] = append(l[:i], l[i+1:]...)
				pl.st.Reserved -= best
				pl.st.Released++
				got += best
				break
			}
		}
	}
	return got
}

// closePool frees every block of the pool, live or cached (device close,
// after its queues were destroyed); the plugin's Close destroys a driver
// pool.
func (pl *devPool) closePool(impl plugin.Impl) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if drv := pl.knownDriverPoolLocked(); drv != nil {
		for p := range pl.live {
			_ = drv.Free(p, nil, nil)
		}
		pl.live = map[uintptr]uintptr{}
		pl.st.InUse = 0
		return
	}
	for _, l := range pl.free {
		for _, b := range l {
			_ = impl.Free(plugin.MemDevice, b.p)
		}
	}
	for p := range pl.live {
		_ = impl.Free(plugin.MemDevice, p)
	}
	pl.free, pl.live = map[uintptr][]poolBlock{}, map[uintptr]uintptr{}
	pl.st.Reserved, pl.st.InUse = 0, 0
}
