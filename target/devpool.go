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
// queues a free waits for. Otherwise (older CUDA drivers, HSA) the pool is
// the size-class cache here, under the same rule:
//
//   - every copy ompalloc queues on a block (Memcpy,
//     MemcpyAsync, the typed copies, omp_target_memset) records its queue on the
//     block, and Queue.RecordUse records work ompalloc did not issue (a
//     user's kernel); PyTorch leaves that to the user (record_stream), and
//     a forgotten call there hands the block to the next tensor while the
//     other stream still reads it;
//   - a block freed with a queue (PoolFree(p, q)) that no other queue
//     recorded may be handed out again at once to an allocation for q (its
//     later work runs after the work issued before the free), and to any
//     other user once q's work issued before the free has completed; a
//     block other queues recorded waits for those queues' work issued before
//     the free too, for q as well;
//   - a block freed without a queue may be handed out once the work issued
//     before the free on every open queue of the device (and on the other
//     devices' queues that recorded it) has completed (the wait cuMemFree
//     does, done later and without blocking);
//   - a limit (SetPoolLimit, like pool_size) bounds the bytes reserved from
//     the driver; at the limit, ready free blocks are given back first;
//   - an allocation the driver refuses for want of memory
//     (ErrOutOfMemory) gives every ready cached block back (and
//     trims the driver's pool) and is retried once, as LLVM's memory manager
//     and PyTorch's caching allocator do;
//   - the size-class cache keeps at most an eighth of the device's memory
//     in free blocks: above that, an allocation that asks the driver gives
//     ready free blocks back first (LLVM caches only blocks of 8 KiB or
//     less; a tensor library's working set is larger);
//   - TrimPool gives ready free blocks back to the driver.
//
// No driver call is made under the pool's mutex: blocks to give back are
// taken out of the books under it and freed after it (cuMemFree
// synchronizes the device: under the mutex, every PoolAlloc and PoolFree of
// the device would wait for the GPU to go idle).

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// ErrPoolLimit: a pool allocation would take the device pool past its limit.
var ErrPoolLimit = errors.New("device pool limit reached")

// PoolStats describes a device's memory pool, as torch.cuda.memory_stats
// does: bytes reserved from the driver against bytes handed out.
//
// Hits and Misses count the allocations of every kind of pool (PyTorch's
// segment reuse against cudaMalloc calls, CuPy's cache hits):
//   - the size-class cache (HSA, CUDA drivers without a stream-ordered
//     allocator): a hit is an allocation served by a cached free block, a
//     miss one that asked the driver for memory (one hsa_amd_memory_pool_allocate
//     or cuMemAlloc each);
//   - the driver's stream-ordered pool (DriverPool): a miss is an allocation
//     after which the pool's reserved bytes (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
//     read after each allocation) exceeded what they were before it: the
//     driver reserved more; a hit is one served from memory the pool had
//     reserved already, a block freed before or the unused rest of what the
//     driver reserved in its own granularity. With a limit set the driver
//     may give memory back at another thread's synchronization during an
//     allocation, which can make that miss count as a hit.
//
// With the driver's pool, Reserved and InUse are the driver's own figures
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, USED_MEM_CURRENT, read when
// PoolStats is called) plus those of blocks the size-class cache still
// holds from before the driver's pool could be made; Allocs counts the
// allocations, and FreeBlocks, Waiting and Released count only the size-class
// cache's blocks: the driver does not say.
type PoolStats struct {
	Reserved   uintptr // bytes of device memory the pool holds (in use and free)
	InUse      uintptr // bytes of the blocks handed out (rounded to their size class)
	FreeBlocks int     // cached blocks, ready or waiting for their queue's work
	Waiting    int     // cached blocks not yet reusable by every queue
	Limit      uintptr // 0: no limit
	Hits       uint64  // allocations served from memory the pool held already
	Misses     uint64  // allocations for which the pool reserved more from the driver
	Released   uint64  // blocks given back to the driver (trim, limit, bound, out of memory)
	DriverPool bool    // the driver's stream-ordered allocator serves the device
	Allocs     uint64  // allocations (hits and misses, or the driver pool's)
}

type poolBlock struct {
	p     uintptr
	size  uintptr
	q     *Queue       // may be reused at once by an allocation for q (nil: by none)
	ready *atomic.Bool // reusable by everyone
	waits []*Queue     // the queues whose work it waits for
}

// liveBlock is a block handed out.
type liveBlock struct {
	size  uintptr  // the class size (cache), or the bytes asked (driver pool)
	drv   bool     // from the driver's pool
	users []*Queue // queues whose work touches it: a free waits for them
}

// addUser records q on b (once).
func (b *liveBlock) addUser(q *Queue) {
	for _, u := range b.users {
		if u == q {
			return
		}
	}
	b.users = append(b.users, q)
}

type drvHandle struct{ mp plugin.MemPool }

// maxPoolAsks bounds how often a device whose driver pool could not be made
// asks again (on cache misses), so that a driver that always fails costs
// at most that many extra calls.
const maxPoolAsks = 4

type devPool struct {
	mu       sync.Mutex
	free     map[uintptr][]poolBlock // by class size, most recently freed last
	live     map[uintptr]*liveBlock  // handed-out blocks, cache's and driver pool's
	starts   []uintptr               // the live blocks' addresses, sorted: a copy into part of one finds it
	st       PoolStats               // the size-class cache's figures
	pending  uintptr                 // of st.Reserved, bytes reserved for driver calls not yet returned
	drvInUse uintptr                 // bytes the driver's pool handed out
	drvRes   uint64                  // the driver pool's reserved bytes as last read
	limit    uintptr
	mem      *devMem      // the device's books: the reserved peak follows every change here
	nlive    atomic.Int64 // len(live): a copy skips the lookup while 0

	askMu    sync.Mutex // one request for the driver's pool at a time; never taken under mu
	asks     int        // requests made (under askMu)
	asked    atomic.Bool
	drv      atomic.Pointer[drvHandle] // the driver's stream-ordered pool, once made
	drvNo    atomic.Bool               // no driver pool will come: not a MemPooler, or asked maxPoolAsks times
	cfgMu    sync.Mutex                // orders SetPoolLimit's driver calls
	freeErrs atomic.Int64              // deferred driver-pool frees the driver refused (kept live)
}

func newDevPool(mem *devMem) *devPool {
	return &devPool{free: map[uintptr][]poolBlock{}, live: map[uintptr]*liveBlock{}, mem: mem}
}

// reservedLocked tells the device's books the pool's reserved bytes now,
// at every change, so that PeakReserved is the true peak: the cache's
// blocks (not those still being asked of the driver) and the driver
// pool's last reading.
func (pl *devPool) reservedLocked() {
	pl.mem.setPoolReserved(uint64(pl.st.Reserved-pl.pending) + pl.drvRes)
}

// syncDriverLocked takes the driver pool's reserved bytes as it last read
// them (after an allocation or a trim).
func (pl *devPool) syncDriverLocked(drv plugin.MemPool) {
	_, _, pl.drvRes = drv.Reuse()
	pl.reservedLocked()
}

// trimDriver trims the driver's pool and takes its reserved bytes after.
func (pl *devPool) trimDriver(drv plugin.MemPool, keep uintptr) error {
	err := drv.Trim(keep)
	pl.mu.Lock()
	pl.syncDriverLocked(drv)
	pl.mu.Unlock()
	return err
}

// driverPool returns the driver's stream-ordered pool of d when it was
// made, without asking for it.
func (pl *devPool) driverPool() plugin.MemPool {
	if h := pl.drv.Load(); h != nil {
		return h.mp
	}
	return nil
}

// askDriverPool asks the plugin for its stream-ordered pool: at the first
// pool allocation of the open device, then again on cache misses while it
// answered nil (a transient cuMemPoolCreate failure must not keep the
// device on the cache for the process's life), at most maxPoolAsks times.
// The release threshold follows the limit. The driver calls run under
// askMu, never under mu.
func (d *Device) askDriverPool() plugin.MemPool {
	pl := d.devpool
	pl.askMu.Lock()
	defer pl.askMu.Unlock()
	if drv := pl.driverPool(); drv != nil || pl.drvNo.Load() {
		return drv
	}
	mp, ok := d.impl.(plugin.MemPooler)
	if !ok {
		pl.drvNo.Store(true)
		pl.asked.Store(true)
		return nil
	}
	pl.asks++
	drv := mp.MemPool()
	pl.asked.Store(true)
	if drv == nil {
		if pl.asks >= maxPoolAsks {
			pl.drvNo.Store(true)
		}
		return nil
	}
	pl.mu.Lock()
	limit := pl.limit
	pl.mu.Unlock()
	if limit != 0 {
		_ = drv.SetReleaseThreshold(uint64(limit))
	}
	pl.drv.Store(&drvHandle{drv})
	return drv
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
	pl := d.devpool
	if drv := pl.driverPool(); drv != nil {
		return d.driverPoolAlloc(drv, n, q)
	}
	asked := false
	if !pl.asked.Load() {
		asked = true
		if drv := d.askDriverPool(); drv != nil {
			return d.driverPoolAlloc(drv, n, q)
		}
	}
	return d.cacheAlloc(n, q, asked)
}

// cacheAlloc is PoolAlloc from the size-class cache; asked: the call asked
// for the driver's pool already.
func (d *Device) cacheAlloc(n uintptr, q *Queue, asked bool) (uintptr, error) {
	pl := d.devpool
	c := poolClass(n)
	for try := 0; ; try++ {
		pl.mu.Lock()
		if p, ok := pl.takeLocked(c, q); ok {
			pl.mu.Unlock()
			return p, nil
		}
		// Before asking the driver, see whether the queues the cached
		// blocks wait for are done: one query per queue, on a miss only.
		var waits []*Queue
		if try == 0 {
			waits = pl.waitsLocked(c)
		}
		pl.mu.Unlock()
		if len(waits) == 0 {
			break
		}
		for _, w := range waits {
			w.recycleIfDone()
		}
	}
	// A miss: the driver's pool may be had now, if asking failed before.
	if !asked && !pl.drvNo.Load() {
		if drv := d.askDriverPool(); drv != nil {
			return d.driverPoolAlloc(drv, n, q)
		}
	}
	pl.mu.Lock()
	var give []poolBlock
	if pl.limit != 0 && pl.st.Reserved+c > pl.limit {
		give = pl.takeReadyLocked(pl.st.Reserved + c - pl.limit)
		if pl.st.Reserved+c > pl.limit {
			st, limit := pl.st, pl.limit
			pl.mu.Unlock()
			_, ferr := pl.giveBack(d, give)
			return 0, errors.Join(fmt.Errorf("device %d: pool alloc of %d bytes: %w: %d of %d bytes reserved (%d in use)",
				d.ID, n, ErrPoolLimit, st.Reserved, limit, st.InUse), ferr)
		}
	}
	if keep := d.cacheKeep(); keep != 0 && pl.st.Reserved-pl.st.InUse > keep {
		give = append(give, pl.takeReadyLocked(pl.st.Reserved-pl.st.InUse-keep)...)
	}
	pl.st.Reserved += c // reserved before the driver call, so that racing allocations respect the limit
	pl.pending += c     // but not in the peak until the driver gave it
	pl.st.Misses++
	pl.st.Allocs++
	pl.reservedLocked() // takeReadyLocked may have given some back
	pl.mu.Unlock()
	if kept, ferr := pl.giveBack(d, give); ferr != nil && pl.overLimit() {
		// The driver refused to take back what made room under the limit.
		pl.mu.Lock()
		pl.st.Reserved -= c
		pl.pending -= c
		pl.reservedLocked()
		pl.mu.Unlock()
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w: %d bytes the driver would not take back: %w", d.ID, n, ErrPoolLimit, kept, ferr)
	}
	p, err := d.impl.Alloc(MemDevice, c)
	if errors.Is(err, ErrOutOfMemory) {
		d.releaseForRetry()
		p, err = d.impl.Alloc(MemDevice, c)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.pending -= c
	if err != nil {
		pl.st.Reserved -= c
		pl.reservedLocked()
		return 0, fmt.Errorf("device %d: pool alloc of %d bytes: %w", d.ID, n, plugin.Cause(err))
	}
	pl.addLiveLocked(p, &liveBlock{size: c})
	pl.st.InUse += c
	pl.reservedLocked()
	return p, nil
}

// cacheKeep is the bound on the bytes of free blocks the size-class cache
// keeps: an eighth of the device's memory (0, no bound, when the plugin
// does not say how much it has).
func (d *Device) cacheKeep() uintptr {
	return uintptr(d.Info().Memory / 8)
}

func (pl *devPool) overLimit() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.limit != 0 && pl.st.Reserved > pl.limit
}

// releaseForRetry makes room after the driver refused an allocation for
// want of memory: the queues cached blocks wait for are asked whether
// their work is done, every ready cached block goes back to the driver,
// and the driver's pool is trimmed. No lock is held across the driver calls.
func (d *Device) releaseForRetry() {
	pl := d.devpool
	pl.mu.Lock()
	waits := pl.waitsLocked(0)
	pl.mu.Unlock()
	for _, w := range waits {
		w.recycleIfDone()
	}
	pl.mu.Lock()
	give := pl.takeReadyLocked(^uintptr(0))
	pl.mu.Unlock()
	_, _ = pl.giveBack(d, give)
	if drv := pl.driverPool(); drv != nil {
		_ = pl.trimDriver(drv, 0)
	}
}

// takeLocked hands out a cached block of class c that q may use.
func (pl *devPool) takeLocked(c uintptr, q *Queue) (uintptr, bool) {
	list := pl.free[c]
	for i := len(list) - 1; i >= 0; i-- {
		b := list[i]
		if b.ready.Load() || (q != nil && b.q == q) {
			pl.free[c] = append(list[:i], list[i+1:]...)
			pl.addLiveLocked(b.p, &liveBlock{size: c})
			pl.st.InUse += c
			pl.st.Hits++
			pl.st.Allocs++
			return b.p, true
		}
	}
	return 0, false
}

// waitsLocked lists the queues the waiting blocks of class c (0: of every
// class) wait for.
func (pl *devPool) waitsLocked(c uintptr) []*Queue {
	seen := map[*Queue]bool{}
	var out []*Queue
	for class, l := range pl.free {
		if c != 0 && class != c {
			continue
		}
		for _, b := range l {
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
	}
	return out
}

// addLiveLocked and removeLiveLocked keep live, starts and nlive together.
func (pl *devPool) addLiveLocked(p uintptr, b *liveBlock) {
	pl.live[p] = b
	i := sort.Search(len(pl.starts), func(i int) bool { return pl.starts[i] >= p })
	pl.starts = append(pl.starts, 0)
	copy(pl.starts[i+1:], pl.starts[i:])
	pl.starts[i] = p
	pl.nlive.Add(1)
}

func (pl *devPool) removeLiveLocked(p uintptr) (*liveBlock, bool) {
	b, ok := pl.live[p]
	if !ok {
		return nil, false
	}
	delete(pl.live, p)
	i := sort.Search(len(pl.starts), func(i int) bool { return pl.starts[i] >= p })
	pl.starts = append(pl.starts[:i], pl.starts[i+1:]...)
	pl.nlive.Add(-1)
	return b, true
}

// record notes that work on q touches [p, p+n) of the device's memory: a
// live block there is reused only once q has passed that work. Memory that
// is no block of the pool is left alone. One atomic load while the pool
// hands out nothing.
func (pl *devPool) record(p, n uintptr, q *Queue) bool {
	if q == nil || n == 0 || pl.nlive.Load() == 0 {
		return false
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	// The last block starting at or before p, then every one up to p+n.
	i := sort.Search(len(pl.starts), func(i int) bool { return pl.starts[i] > p })
	if i > 0 {
		i--
	}
	found := false
	for ; i < len(pl.starts) && pl.starts[i] < p+n; i++ {
		s := pl.starts[i]
		b := pl.live[s]
		if p < s+b.size && s < p+n {
			b.addUser(q)
			found = true
		}
	}
	return found
}

// noteUse records q's work on [p, p+n) of d's memory (record).
func (d *Device) noteUse(p, n uintptr, q *Queue) { d.devpool.record(p, n, q) }

// RecordUse records that work on q which ompalloc did not issue (a kernel
// of the program's, a copy of another library's) reads or writes the
// device-pool block holding p: the block is handed out again only once q
// has passed the work issued on it so far, whichever queue frees it. The
// copies ompalloc queues record themselves. p may be anywhere inside a
// block PoolAlloc, PoolArray or AllocArray returned, of q's device or, for
// work that reaches a peer's memory, of another device of its plugin; other
// memory is an error (ErrInvalidArgument), as is a closed queue.
func (q *Queue) RecordUse(p uintptr) error {
	if q == nil {
		return fmt.Errorf("record use of %#x: a nil queue: %w", p, ErrInvalidArgument)
	}
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return fmt.Errorf("record use of %#x: %w", p, ErrQueueClosed)
	}
	if q.dev.devpool.record(p, 1, q) {
		return nil
	}
	for _, o := range attached() {
		if o != q.dev && !o.host && o.plugin == q.dev.plugin && o.devpool.record(p, 1, q) {
			return nil
		}
	}
	return fmt.Errorf("device %d: record use of %#x: %w: not in a live block of a device pool", q.dev.ID, p, ErrInvalidArgument)
}

// busyUsers splits the queues recorded on a block, but q and those known
// idle, into d's and other devices'.
func (d *Device) busyUsers(users []*Queue, q *Queue) (same, foreign []*Queue) {
	for _, u := range users {
		if u == q || u.idle() {
			continue
		}
		if u.dev == d {
			same = append(same, u)
		} else {
			foreign = append(foreign, u)
		}
	}
	return same, foreign
}

// openQueues lists d's open queues.
func (d *Device) openQueues() []*Queue {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	qs := make([]*Queue, 0, len(d.queues))
	for o := range d.queues {
		qs = append(qs, o)
	}
	return qs
}

// poolFree is PoolFree (memstats.go) after the books.
func (d *Device) poolFree(p uintptr, q *Queue) error {
	if err := d.checkQueue(q); err != nil {
		return err
	}
	pl := d.devpool
	pl.mu.Lock()
	b, ok := pl.removeLiveLocked(p)
	if !ok {
		pl.mu.Unlock()
		return fmt.Errorf("device %d: pool free of %#x: %w: not a live block of the device's pool", d.ID, p, ErrInvalidArgument)
	}
	same, foreign := d.busyUsers(b.users, q)
	if b.drv {
		pl.drvInUse -= b.size
		pl.mu.Unlock()
		return d.driverPoolFree(pl.driverPool(), p, b, q, same, foreign)
	}
	c := b.size
	pl.st.InUse -= c
	reuse := q
	var qs []*Queue
	if q != nil {
		qs = append(append([]*Queue{q}, same...), foreign...)
		if len(same)+len(foreign) > 0 {
			reuse = nil // another queue may still read it: q waits too
		}
	} else {
		qs = append(d.openQueues(), foreign...)
	}
	ready := new(atomic.Bool)
	pl.free[c] = append(pl.free[c], poolBlock{p: p, size: c, q: reuse, ready: ready, waits: qs})
	pl.mu.Unlock()

	// Ready once every queue's work before now completed: a countdown with
	// one extra count held until all are asked.
	afterAll(qs, func() { ready.Store(true) })
	return nil
}

// afterAll runs fn once the work issued so far on every queue of qs has
// completed (at once when none has any): a countdown with one extra count
// held until all are asked. A closed queue's work is done.
func afterAll(qs []*Queue, fn func()) {
	left := new(atomic.Int64)
	left.Store(1)
	done := func() {
		if left.Add(-1) == 0 {
			fn()
		}
	}
	for _, o := range qs {
		left.Add(1)
		if o.after(done) != nil {
			done()
		}
	}
	done()
}

// poolStats reports d's device-memory pool (MemoryStats().Pool).
func (d *Device) poolStats() PoolStats {
	pl := d.devpool
	pl.mu.Lock()
	st := pl.st
	st.Reserved -= pl.pending // not the driver's yet
	st.Limit = pl.limit
	for _, l := range pl.free {
		st.FreeBlocks += len(l)
		for _, b := range l {
			if !b.ready.Load() {
				st.Waiting++
			}
		}
	}
	pl.mu.Unlock()
	if drv := pl.driverPool(); drv != nil {
		st.DriverPool = true
		if reserved, used, err := drv.Stats(); err == nil {
			st.Reserved += uintptr(reserved)
			st.InUse += uintptr(used)
		}
		hits, misses, _ := drv.Reuse()
		st.Hits += hits
		st.Misses += misses
		pl.mu.Lock()
		pl.syncDriverLocked(drv) // Stats read the reserved bytes afresh
		pl.mu.Unlock()
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
	pl.cfgMu.Lock()
	defer pl.cfgMu.Unlock()
	pl.mu.Lock()
	pl.limit = n
	var give []poolBlock
	if n != 0 && pl.st.Reserved > n {
		give = pl.takeReadyLocked(pl.st.Reserved - n)
	}
	pl.mu.Unlock()
	_, _ = pl.giveBack(d, give)
	if drv := pl.driverPool(); drv != nil {
		keep := ^uint64(0)
		if n != 0 {
			keep = uint64(n)
			_ = pl.trimDriver(drv, n)
		}
		_ = drv.SetReleaseThreshold(keep)
	}
}

// TrimPool gives the ready free blocks of d's pool back to the driver
// until at most keep bytes are reserved (cuMemPoolTrimTo, CuPy's
// free_all_blocks with keep 0), and returns the bytes released. Blocks
// whose queue's work is still running stay (with the driver's pool, also
// frees issued on a queue the host has not synchronized since).
//
// The driver's pool keeps the memory of freed blocks reserved (its release
// threshold is the limit, no bound by default) until TrimPool or the next
// synchronization above the threshold: a program that hands the device to
// another library of the process (cuMemAlloc, another allocator, a
// library's own cudaMallocAsync pool) calls TrimPool(0) first, or sets
// SetPoolLimit to what it needs, so that the device gets the rest back at
// each synchronization. ompalloc's own allocations trim and retry by
// themselves when the driver runs out.
func (d *Device) TrimPool(keep uintptr) uintptr {
	pl := d.devpool
	pl.mu.Lock()
	var give []poolBlock
	if pl.st.Reserved > keep {
		give = pl.takeReadyLocked(pl.st.Reserved - keep)
	}
	cacheLeft := pl.st.Reserved
	pl.mu.Unlock()
	got, _ := pl.giveBack(d, give)
	if drv := pl.driverPool(); drv != nil {
		var k uintptr
		if keep > cacheLeft {
			k = keep - cacheLeft
		}
		got += pl.driverPoolTrim(drv, k)
	}
	return got
}

// takeReadyLocked takes ready free blocks out of the cache, largest class
// first, until want bytes are taken or none is left; their bytes leave
// Reserved now (giveBack puts back those the driver refuses).
func (pl *devPool) takeReadyLocked(want uintptr) []poolBlock {
	var got uintptr
	var out []poolBlock
	for got < want {
		var best uintptr
		for c, l := range pl.free {
			if c <= best {
				continue
			}
			for _, b := range l {
				if b.ready.Load() {
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
				pl.free[best] = append(l[:i], l[i+1:]...)
				pl.st.Reserved -= best
				got += best
				out = append(out, b)
				break
			}
		}
	}
	if got != 0 {
		pl.reservedLocked()
	}
	return out
}

// giveBack frees blocks takeReadyLocked took, without pl.mu; those the
// driver refuses go back into the cache, to be retried by a later trim. It
// returns the bytes released, or the bytes kept and the driver's error.
func (pl *devPool) giveBack(d *Device, bs []poolBlock) (uintptr, error) {
	var got, kept uintptr
	var errs []error
	for _, b := range bs {
		if err := d.impl.Free(MemDevice, b.p); err != nil {
			errs = append(errs, err)
			kept += b.size
			pl.mu.Lock()
			pl.free[b.size] = append(pl.free[b.size], b)
			pl.st.Reserved += b.size
			pl.reservedLocked()
			pl.mu.Unlock()
			continue
		}
		got += b.size
		pl.mu.Lock()
		pl.st.Released++
		pl.mu.Unlock()
	}
	if len(errs) > 0 {
		return kept, errors.Join(errs...)
	}
	return got, nil
}

// closePool frees every block of the pool, live or cached (device close,
// after its queues were destroyed); the plugin's Close destroys a driver
// pool.
func (pl *devPool) closePool(impl plugin.Impl) {
	pl.mu.Lock()
	var cached, drvLive []uintptr
	for _, l := range pl.free {
		for _, b := range l {
			cached = append(cached, b.p)
		}
	}
	for p, b := range pl.live {
		if b.drv {
			drvLive = append(drvLive, p)
		} else {
			cached = append(cached, p)
		}
	}
	pl.free, pl.live, pl.starts = map[uintptr][]poolBlock{}, map[uintptr]*liveBlock{}, nil
	pl.nlive.Store(0)
	pl.st.Reserved, pl.st.InUse, pl.drvInUse, pl.drvRes = 0, 0, 0, 0
	pl.reservedLocked()
	pl.mu.Unlock()
	if drv := pl.driverPool(); drv != nil {
		for _, p := range drvLive {
			_ = drv.Free(p, nil, nil)
		}
	}
	for _, p := range cached {
		_ = impl.Free(MemDevice, p)
	}
}
