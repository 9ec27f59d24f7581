package alloc

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ompalloc/ompalloc/internal/cgroup"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/envsize"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/pinlimit"
	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/internal/warn"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// Pinned memory is served by one caching pool per device (one heap, or one
// per NUMA node for the host device on a multi-node machine: pinnodes.go):
// chunks are mapped,
// locked through the device (mlock on the host, cuMemHostRegister or
// hsa_amd_memory_lock on a GPU) and registered in its registry once, then
// sub-allocated like any heap. Small blocks share locked chunks; freed
// blocks are reused without relocking; huge blocks are never rounded to a
// power of two, and freed ones are kept (up to pinnedKeepHuge) for reuse.
// Trim unlocks what is idle, and so does the destruction of the last
// allocator drawing on a pool (see PinnedPoolStats for the policy).
const (
	pinnedKeepChunks = PoolKeepChunks // 16 MiB of empty locked chunks kept (per heap: per node)
	pinnedKeepHuge   = PoolKeepHuge   // bytes of freed huge locked regions kept (per heap)
)

var (
	pinnedMu    sync.Mutex
	pinnedPools = map[pinKey]*pinnedPool{} // by device, and bound nodes (pinnodes.go)
)

// pinKey names a pinned pool: a device's own (bound ""), or one whose chunks
// are bound to a memory space's nodes (FormatList) and locked through the
// device, for pinned allocators on high_bw, large_cap or a sub-memory space.
type pinKey struct {
	dev   int
	bound string
}

// Shutdown of the devices must not pull locked chunks from under the pinned
// heaps: first give back the idle ones; target refuses while any stay held.
func init() { device.BeforeShutdown(trimPinned) }

func pinDevice(set traits.Set) (int, error) {
	if set.PinDevice >= 0 {
		// target.Get: a device that is not there comes with the drivers'
		// reasons (target.DriverError) for the trait error.
		if _, err := target.Get(set.PinDevice); err != nil {
			return 0, &traits.TraitError{Key: traits.PinDevice, Value: uintptr(set.PinDevice), HasValue: true, Reason: err.Error()}
		}
		return set.PinDevice, nil
	}
	return device.DefaultDevice(), nil
}

// pinnedHeap returns the home heap of device dev's pinned pool: its only
// heap, or the first node's when it has one per node (pinnedPoolOf tells).
func pinnedHeap(dev int) *heap.Heap { return pinnedPoolFor(dev).heaps[0] }

// pinnedHeapOn is pinnedHeap for a pinned allocator on memory space ms:
// where ms is restricted to some NUMA nodes (high_bw on HBM, large_cap on
// CXL memory, a sub-memory space), the home heap of the device's pool
// bound to them; else the device's own pool's. Without memory policies
// (macOS) no node can be honoured, as for unpinned memory (placementOf).
func pinnedHeapOn(dev int, ms memspace.ID) *heap.Heap {
	if numa.Supported() {
		if nodes, restricted, _ := memspace.Placement(ms); restricted {
			return boundPinnedPoolFor(dev, nodes).heaps[0]
		}
	}
	return pinnedHeap(dev)
}

func pinnedPoolFor(dev int) *pinnedPool {
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	pp := pinnedPools[pinKey{dev: dev}]
	if pp == nil {
		pp = newPinnedPool(dev)
		pinnedPools[pinKey{dev: dev}] = pp
	}
	return pp
}

// boundPinnedPoolFor returns the pinned pool of device dev whose chunks are
// bound to nodes (a memory space's, ascending).
func boundPinnedPoolFor(dev int, nodes []int) *pinnedPool {
	k := pinKey{dev: dev, bound: numa.FormatList(nodes)}
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	pp := pinnedPools[k]
	if pp == nil {
		pp = newBoundPinnedPool(dev, nodes)
		pinnedPools[k] = pp
	}
	return pp
}

// pinnedPoolOf returns the pinned pool whose home heap is h, if any.
func pinnedPoolOf(h *heap.Heap) *pinnedPool {
	if h == nil {
		return nil
	}
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	for _, pp := range pinnedPools {
		if pp.heaps[0] == h {
			return pp
		}
	}
	return nil
}

func trimPinned() { trimPinnedBytes() }

// trimPinnedBytes gives back the idle memory of every pinned pool and
// returns the bytes released.
func trimPinnedBytes() uintptr {
	pinnedMu.Lock()
	var hs []*heap.Heap
	var srcs []*pinSource
	for _, pp := range pinnedPools {
		hs = append(hs, pp.heaps...)
		srcs = append(srcs, pp.srcs...)
	}
	pinnedMu.Unlock()
	var n uintptr
	for _, h := range hs {
		// Each Trim costs a GC cycle (its grace period); a heap that holds
		// no memory (a pool bound to a memory space's nodes whose
		// allocators never pinned, or gave it all back) has nothing to
		// give back, and skipping it keeps Trim's cost to the heaps in use.
		if h.Stats().Mapped == 0 {
			continue
		}
		n += h.Trim()
	}
	for _, s := range srcs {
		s.retry()
	}
	return n
}

// pinSource maps memory and locks it through a device. It holds each chunk
// (device.(*Device).Hold, the device core), so that a user's unlock cannot unlock it.
type pinSource struct {
	dev  int
	node int    // the node its chunks prefer; -1: the device's (Info().NUMANode)
	bind []int  // non-nil: the nodes its chunks are bound to instead (boundPinnedPoolFor)
	name string // the owner the registry names
	heap string // its heap's name, for errors

	mu      sync.Mutex
	stuck   map[uintptr]uintptr // chunks the device could not unlock yet: start → size
	partial map[uintptr]uintptr // chunks locked only in part (AcquireChunk): start → bytes locked

	counts poolCounts // this pool's lock calls (PinnedPoolStats)
}

func (s *pinSource) Acquire(n, align uintptr) (uintptr, error) { return s.acquire(n, align, n) }

// AcquireChunk serves the heap's 4 MiB chunks (heap.PartialSource): under a
// pinned-bytes limit with less than a chunk left, it maps the whole chunk
// but locks, registers and counts only what the limit allows (in 64 KiB
// pages), so that a 1 MiB limit still serves about 1 MiB of small blocks.
func (s *pinSource) AcquireChunk(n, align, need uintptr) (p, usable uintptr, err error) {
	usable = n
	if max, used := pinnedLimit(); max > 0 && used+n > max {
		if avail := (max - min(used, max)) &^ (64<<10 - 1); avail >= need {
			usable = avail
		} else {
			usable = need // the limit refuses what the heap needs, by name: not the whole chunk
		}
	}
	p, err = s.acquire(n, align, usable)
	return p, usable, err
}

// acquire maps n bytes and locks the first lockN of them.
func (s *pinSource) acquire(n, align, lockN uintptr) (uintptr, error) {
	p, err := s.lockChunk(n, align, lockN)
	if err != nil {
		s.counts.failures.Add(1)
	}
	return p, err
}

func (s *pinSource) lockChunk(n, align, lockN uintptr) (uintptr, error) {
	if err := pinLimit.reserve(lockN, s.dev); err != nil {
		return 0, pinFailure{err, s.heap}
	}
	c, err := dl.C()
	if err == nil {
		err = fault.Check(fault.PinMap)
	}
	if err != nil {
		pinLimit.release(lockN)
		return 0, err
	}
	p, err := s.mapPages(c, n, align, lockN) // hugetlb pages when asked for (hugepages.go)
	if err != nil {
		pinLimit.release(lockN)
		return 0, err
	}
	adviseHuge(p, n) // before locking: the lock then faults 2 MiB pages (numa.go)
	d, err := device.Get(s.dev)
	if err == nil {
		err = fault.Check(fault.PinLock)
	}
	if err == nil && s.bind != nil {
		// Bound before locking faults the pages in (numa.go): a refusal
		// fails the chunk, never leaves it elsewhere.
		err = numa.Apply(p, numa.Plan(n, pageSize, numa.Spec{Partition: numa.Environment, Nodes: s.bind}, nil))
	} else if err == nil {
		node := s.node
		if node < 0 {
			node = d.Info().NUMANode
		}
		placeNearDevice(p, n, node) // before locking faults the pages in (numa.go)
		start := time.Now()
		_, err = d.Hold(p, lockN, s.name, isHugeTLB(p))
		s.counts.nanos.Add(time.Since(start).Nanoseconds())
		pinStats.lockNanos.Add(time.Since(start).Nanoseconds())
	}
	if err != nil {
		_ = unmapPages(c, p, n)
		pinLimit.release(lockN)
		return 0, pinFailure{fmt.Errorf("%w: %d bytes for device %d: %w", ErrPinFailed, lockN, s.dev, err), s.heap}
	}
	if lockN != n {
		s.mu.Lock()
		if s.partial == nil {
			s.partial = map[uintptr]uintptr{}
		}
		s.partial[p] = lockN
		s.mu.Unlock()
	}
	pinStats.locks.Add(1)
	s.counts.locks.Add(1)
	return p, nil
}

// Release unlocks and unmaps a chunk the heap gave up. Locks a user took
// inside it (TargetLockMem on a pinned block, never unlocked) are dropped
// with one warning: the memory is about to be unmapped, and an entry left
// behind would make the next chunk mapped there look locked. A chunk the
// device reports still locked (munlock refused at vm.max_map_count) stays
// mapped, locked, registered and counted; Trim tries it again.
func (s *pinSource) Release(p, n uintptr) error {
	var uerr error
	if d, err := device.Get(s.dev); err == nil {
		start := time.Now()
		var locks, mapped int
		if uerr = fault.Check(fault.PinUnlock); uerr != nil {
			uerr = fmt.Errorf("%w: %w", uerr, sentinel.ErrStillLocked)
		} else {
			locks, mapped, uerr = d.Release(p)
		}
		s.counts.nanos.Add(time.Since(start).Nanoseconds())
		pinStats.lockNanos.Add(time.Since(start).Nanoseconds())
		if uerr == nil {
			s.counts.unlocks.Add(1)
		}
		if locks+mapped > 0 {
			warn.Printf(warn.DroppedLock, "alloc", "alloc: %s released its chunk [%#x, %#x) with %d locks (TargetLockMem) and %d mapped locks still inside it; they are dropped",
				s.name, p, p+n, locks, mapped)
		}
		if errors.Is(uerr, sentinel.ErrStillLocked) {
			s.mu.Lock()
			if s.stuck == nil {
				s.stuck = map[uintptr]uintptr{}
			}
			s.stuck[p] = n
			s.mu.Unlock()
			return uerr
		}
	}
	c, err := dl.C()
	if err == nil {
		err = unmapPages(c, p, n)
	}
	s.mu.Lock()
	lockN, ok := s.partial[p]
	delete(s.partial, p)
	s.mu.Unlock()
	if !ok {
		lockN = n
	}
	pinLimit.release(lockN)
	if uerr != nil {
		return uerr
	}
	return err
}

// lockedLen is how much of the chunk or region [p, p+n) is locked (s.mu held).
func (s *pinSource) lockedLen(p, n uintptr) uintptr {
	if l, ok := s.partial[p]; ok {
		return l
	}
	return n
}

// retry releases the chunks the device could not unlock before.
func (s *pinSource) retry() {
	s.mu.Lock()
	stuck := s.stuck
	s.stuck = nil
	s.mu.Unlock()
	for p, n := range stuck {
		_ = s.Release(p, n) // one that fails again goes back on the list
	}
}

// stuckBytes returns the bytes of chunks still waiting for an unlock.
func (s *pinSource) stuckBytes() (bytes uintptr, chunks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, n := range s.stuck {
		bytes += s.lockedLen(p, n)
		chunks++
	}
	return bytes, chunks
}

// pinLimit caps the bytes all pinned heaps may lock, so that a program
// cannot lock all of RAM by accident; hitting it behaves like a failed pin.
// The default (internal/pinlimit) is what the process may really lock:
// RLIMIT_MEMLOCK when it binds, else half of RAM, and never more than half
// of what its memory cgroup leaves (pinning past a cgroup's limit is an OOM
// kill, not an error).
var pinLimit = &limit{}

type limit struct {
	once sync.Once
	max  atomic.Int64
	used atomic.Int64
	from atomic.Pointer[limitFrom]
}

// limitFrom says where the limit in force came from.
type limitFrom struct {
	def pinlimit.Default
	env string // OMPALLOC_PINNED_LIMIT as set and used; "" when not
	set bool   // SetPinnedLimit
}

func (l *limit) init() {
	l.once.Do(func() {
		def := pinlimit.Compute()
		from := &limitFrom{def: def}
		n := def.Bytes
		if v, ok := envvar.Lookup(envvar.PinnedLimit); ok { // blank: unset, the default
			if x, err := parseSize(v); err == nil {
				n, from.env = int64(x), v
			} else {
				warn.Emit(warn.Env, "alloc", fmt.Sprintf("%s=%q: %v; using the default limit of %d bytes", envvar.PinnedLimit, v, err, n), err)
			}
		}
		l.from.Store(from)
		l.max.Store(n)
	})
}

// pinFailure marks the error of a failed pin, so that an allocator's error
// can say it first (pinReport) rather than after the heap's "out of memory:
// ... a 4194304-byte chunk:": RAM is usually free, a limit bound.
type pinFailure struct {
	error
	heap string // the heap that asked
}

func (e pinFailure) Unwrap() error { return e.error }

// pinReport is an allocator's error for a failed pin: "allocator: heap:
// cause", one sentence, over the pin's chain (ErrPinFailed, the device's or
// the limit's) for errors.Is. Not over the heap's ErrOutOfMemory that
// carried it up: memory was there, the lock was refused, and a caller
// testing errors.Is(err, ErrOutOfMemory) would take the wrong remedy.
type pinReport struct {
	msg string
	err error
}

func (e *pinReport) Error() string { return e.msg }
func (e *pinReport) Unwrap() error { return e.err }

// heapError is the error of a's failed heap allocation.
func (a *Allocator) heapError(err error) error {
	var pf pinFailure
	if errors.As(err, &pf) {
		return &pinReport{msg: fmt.Sprintf("%v: %s: %v", a, pf.heap, pf.error), err: pf.error}
	}
	return fmt.Errorf("%v: %w", a, err)
}

// reserve counts n more bytes to be locked for device dev, or says in one
// sentence which limit refused them and what raises it.
func (l *limit) reserve(n uintptr, dev int) error {
	l.init()
	max := l.max.Load()
	if err := l.checkRoom(n, max); err != nil {
		return err
	}
	if used, ok := reserve(&l.used, int64(n), max); !ok {
		return fmt.Errorf("%w: %d more bytes would exceed the pinned-memory limit of %d bytes (%d pinned), %s",
			ErrPinFailed, n, max, used, l.why(dev))
	}
	return nil
}

// cgroupNow reads the memory cgroup level that leaves the process the
// least room, as it is now (tests feed it fixtures).
var cgroupNow = cgroup.Memory

// checkRoom refuses n more bytes when the memory cgroup has no room for
// them now. The limit in force was decided once, but a cgroup's limit can
// be lowered and its usage (siblings', the rest of the process's) grows
// while the process runs; pinning past the room is an OOM kill, not an
// error. So each chunk or region to lock (rare next to its mlock, which
// costs far more than reading a few small files) takes the cgroup's share
// again (pinlimit.ShareNow: half the limit, three quarters of the room at
// most, the room counting what is pinned already), whatever set the limit.
// Only no limit at all (OMPALLOC_PINNED_LIMIT=0, SetPinnedLimit(0)) skips
// it, as asked.
func (l *limit) checkRoom(n uintptr, limit int64) error {
	if limit == 0 {
		return nil
	}
	c, ok := cgroupNow()
	if !ok {
		return nil
	}
	used := l.used.Load()
	share := pinlimit.ShareNow(c, used)
	if used+int64(n) <= share {
		return nil
	}
	where := fmt.Sprintf("the %s of %s at %s", c.Name(), pinlimit.Size(c.Bytes), c.File)
	if c.Usage >= 0 {
		where += fmt.Sprintf(" (%s in use there now)", pinlimit.Size(c.Usage))
	}
	return fmt.Errorf("%w: %d more bytes would take pinned memory to %d bytes, past the %d that %s leaves for it now (its limit or usage changed since the pinned limit was set): locked memory counts against the cgroup and cannot be reclaimed, so pinning further would end in the OOM killer; raise its memory limit, or pin less",
		ErrPinFailed, n, used+int64(n), max(share, 0), where)
}

// why says where the limit came from and what raises it.
func (l *limit) why(dev int) string {
	f := l.from.Load()
	switch {
	case f.set:
		return "set by alloc.SetPinnedLimit"
	case f.env != "":
		return fmt.Sprintf("set by %s=%s: raise it, or 0 for no limit", envvar.PinnedLimit, f.env)
	}
	s := fmt.Sprintf("from %s: %s", f.def.Why(), f.def.Advice())
	if d, err := device.Get(dev); f.def.Origin == pinlimit.Memlock && err == nil && !d.IsHost() {
		// cuMemHostRegister and hsa_amd_memory_lock are not charged to
		// RLIMIT_MEMLOCK: for a GPU, lifting our cap is enough.
		s += fmt.Sprintf(" (device %d's driver pins without it: %s=0 lifts this cap)", dev, envvar.PinnedLimit)
	}
	return s
}

func (l *limit) release(n uintptr) { l.used.Add(-int64(n)) }

// SetPinnedLimit sets the limit on bytes locked by pinned allocators (0: no
// limit) and returns the previous one.
func SetPinnedLimit(n uintptr) uintptr {
	pinLimit.init()
	f := *pinLimit.from.Load()
	f.set = true
	pinLimit.from.Store(&f)
	return uintptr(pinLimit.max.Swap(int64(n)))
}

// pinnedLimit returns the limit and the bytes currently locked under it
// (what ReadPinnedStats reports as Limit and Used).
func pinnedLimit() (max, used uintptr) {
	pinLimit.init()
	return uintptr(pinLimit.max.Load()), uintptr(pinLimit.used.Load())
}

// parseSize reads a size as every OMPALLOC_* variable does (internal/envsize).
func parseSize(v string) (uintptr, error) {
	n, err := envsize.Parse(v)
	return uintptr(n), err
}

var pinStats struct {
	locks     atomic.Int64
	lockNanos atomic.Int64
}

// PinnedStats describes the pinned heaps of all devices together, and in
// Pools each pool: its huge regions, idle bytes and unlocks.
type PinnedStats struct {
	Bytes    uintptr       // bytes locked for pinned heaps
	Chunks   int           // 4 MiB locked chunks (huge regions apart: see Pools)
	Locks    int64         // lock calls made
	LockTime time.Duration // time spent locking and unlocking

	// Limit is the pinned-bytes limit (0: none; SetPinnedLimit,
	// OMPALLOC_PINNED_LIMIT) and Used the bytes charged against it now:
	// each chunk and region of a pinned heap, charged before it is locked
	// and credited once it is unlocked.
	Limit, Used uintptr
	// HugePages is the mode of the chunks and regions mapped from now on
	// (OMPALLOC_HUGEPAGES, SetHugePages).
	HugePages HugePageMode

	// HugeTLB is the part of Bytes in hugetlb pages (HugePagesTLB). The
	// kernel's VmLck does not count it, although it is locked and
	// registered: with the host device pinning, VmLck (above what the
	// process locked itself) is Bytes - HugeTLB, and /proc/self/status's
	// HugetlbPages is HugeTLB.
	HugeTLB uintptr
	// HugeTLBFallbacks counts the chunks and regions asked for in hugetlb
	// pages that got normal pages (no free huge pages, or none at all).
	HugeTLBFallbacks int64
	// Pools are the pinned pools that exist: one per device that has pinned
	// memory for an allocator, and one per device and memory space of some
	// NUMA nodes that pinned allocators on high_bw, large_cap or a
	// sub-memory space use (PinnedPoolStats.Bound), in device order, a
	// device's own pool first.
	Pools []PinnedPoolStats
}

// pinnedPoolList returns the pinned pools that exist (their heaps and
// sources never change).
func pinnedPoolList() []*pinnedPool {
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	out := make([]*pinnedPool, 0, len(pinnedPools))
	for _, pp := range pinnedPools {
		out = append(out, pp)
	}
	return out
}

// ReadPinnedStats returns the pinned heaps' statistics.
func ReadPinnedStats() PinnedStats {
	var st PinnedStats
	for _, pp := range pinnedPoolList() { // heap.Stats may wait for a release: not under pinnedMu
		for i, h := range pp.heaps {
			hs := h.Stats()
			b, c := pp.srcs[i].stuckBytes()
			st.Bytes += hs.Mapped + b
			st.Chunks += hs.Chunks + c
		}
	}
	st.Limit, st.Used = pinnedLimit()
	st.HugePages = hugePages()
	st.Locks = pinStats.locks.Load()
	st.LockTime = time.Duration(pinStats.lockNanos.Load())
	st.HugeTLB, st.HugeTLBFallbacks = hugeTLBBytes(nil), tlb.fallbacks.Load()
	st.Pools = readPinnedPools()
	return st
}

// pinFallback is an allocator's notice of its first failed pin that went to
// the fallback.
type pinFallback struct {
	done atomic.Bool
	from string // where the allocator came from, when not from a call: "OMP_ALLOCATOR: "
}

// pinFellBack warns once per allocator, the first time a failed pin (an
// error matching ErrPinFailed) sends one of a's allocations to its
// fallback: OpenMP's default_mem_fb would otherwise hand out unpinned
// memory in silence. The warning goes through the hook (package logging,
// kind pin_fallback), which can count or silence it.
func (a *Allocator) pinFellBack(cause error, fb *Allocator) {
	if a.pinFb.done.CompareAndSwap(false, true) {
		warn.Emit(warn.PinFallback, "alloc", fmt.Sprintf("%s%v; this and later blocks that cannot be pinned come from %v, unpinned", a.pinFb.from, cause, fb), cause)
	}
}

// defaultPinnedLimit is the limit without OMPALLOC_PINNED_LIMIT.
func defaultPinnedLimit() int64 { return pinlimit.Compute().Bytes }
