// Package memsample samples allocations for the heap profile of package
// memprof, the way Go's runtime samples its own heap: one allocation per
// Rate bytes on average, the distance to the next sample drawn from an
// exponential distribution (so that every byte has the same chance, whatever
// the sizes), counted down per P. It keeps the stack and labels of each
// sampled block until it is freed, and per stack and labels the totals of
// sampled allocations and frees.
//
// alloc calls it: On (one load) after each successful allocation, Tick
// while it is on, Record for a sampled block; Tracking (one load) before
// each free, Forget while sampled blocks are live.
package memsample

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/pcpu"
)

var (
	on    atomic.Bool  // sampling on: Tick's callers ask
	rate  atomic.Int64 // mean bytes between samples; 0 off
	live  atomic.Int64 // sampled blocks not yet freed: Forget's callers ask
	epoch atomic.Int64 // bumped by SetRate: shards redraw their countdown
)

// On reports whether sampling is on (a plain load on amd64 and arm64).
func On() bool { return on.Load() }

// Tracking reports whether any sampled block is live, so a free must ask
// Forget.
func Tracking() bool { return live.Load() != 0 }

// Rate returns the mean number of bytes between samples (0: off).
func Rate() int { return int(rate.Load()) }

// SetRate sets the mean number of bytes between samples; 0 stops sampling
// (blocks already sampled stay in the profile until freed).
func SetRate(n int) {
	if n < 0 {
		n = 0
	}
	mu.Lock()
	defer mu.Unlock()
	rate.Store(int64(n))
	epoch.Add(1)
	if n > 0 {
		// Fresh countdowns, so that the new rate holds from the next
		// allocation on (an old countdown may be far from its end).
		s := make([]shard, runtime.GOMAXPROCS(0))
		shards.Store(&s)
		slowMu.Lock()
		slow.next = 0
		slowMu.Unlock()
	}
	on.Store(n > 0)
}

// shard is one P's countdown, padded to its own cache lines.
type shard struct {
	guard pcpu.Guard
	next  int64  // bytes until the next sample
	epoch int64  // the SetRate the countdown was drawn under
	rng   uint64 // xorshift state
	_     [128 - 3*8 - unsafe.Sizeof(pcpu.Guard{})]byte
}

var (
	shards atomic.Pointer[[]shard]
	slowMu sync.Mutex
	slow   shard // for Ps past the shards (GOMAXPROCS grew)
)

// Tick counts an allocation of size bytes and reports whether to sample it.
// The countdown is kept short: it is on every allocation's path while
// sampling is on.
func Tick(size uintptr) bool {
	pid := pcpu.Pin()
	if s := shards.Load(); s != nil && uint(pid) < uint(len(*s)) {
		sh := &(*s)[pid]
		sh.guard.Lock()
		sh.next -= int64(size)
		hit := false
		if sh.next < 0 {
			hit = sh.hit(int64(size), pid)
		}
		sh.guard.Unlock()
		pcpu.Unpin()
		return hit
	}
	pcpu.Unpin()
	slowMu.Lock()
	defer slowMu.Unlock()
	slow.next -= int64(size)
	return slow.next < 0 && slow.hit(int64(size), -1)
}

// hit draws the next countdown once this one ran out, and reports whether
// the allocation is sampled.
func (sh *shard) hit(size int64, pid int) bool {
	if e := epoch.Load(); sh.epoch != e {
		// First countdown under this rate (SetRate changed it since): draw
		// one and count this allocation against it.
		sh.epoch = e
		if sh.rng == 0 {
			sh.rng = uint64(time.Now().UnixNano()) | 1 + uint64(pid+2)*0x9e3779b97f4a7c15
		}
		if sh.next = sh.draw() - size; sh.next >= 0 {
			return false
		}
	}
	sh.next = sh.draw()
	return rate.Load() > 0
}

// draw returns an exponentially distributed distance with mean Rate, as
// the runtime's fastexprand does for MemProfileRate.
func (sh *shard) draw() int64 {
	r := rate.Load()
	if r <= 0 {
		return 1 << 40 // off: look again after a TiB
	}
	if r == 1 {
		return 0 // every allocation, as MemProfileRate = 1
	}
	x := sh.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rng = x
	u := (float64(x>>11) + 0.5) / (1 << 53) // in (0, 1)
	d := -math.Log(u) * float64(r)
	if d > 1<<40 {
		d = 1 << 40
	}
	return int64(d)
}

// Labels are what a sampled block is labelled with in the profile.
type Labels struct {
	Allocator string // its allocator's name
	Memspace  string // its memory space
	Pinned    bool   // page-locked
}

// MaxStack is the deepest stack recorded.
const MaxStack = 64

type bucketKey struct {
	stk    [MaxStack]uintptr
	n      int
	labels Labels
}

// Bucket is the sampled allocations of one stack and label set.
type Bucket struct {
	Stack      []uintptr // return addresses, innermost first (runtime.Callers)
	Labels     Labels
	Allocs     int64 // sampled allocations
	AllocBytes int64 // their bytes
	Frees      int64 // of which freed
	FreeBytes  int64
}

type liveBlock struct {
	b    *Bucket
	size int64
}

var (
	mu      sync.Mutex
	buckets = map[bucketKey]*Bucket{}
	blocks  = map[uintptr]liveBlock{}
	// filter counts the live sampled blocks per hash of their address, so
	// that a free of a block never sampled usually takes no lock.
	filter [1 << 14]atomic.Int32
)

func slot(p uintptr) *atomic.Int32 {
	return &filter[(uint64(p>>4)*0x9e3779b97f4a7c15)>>(64-14)]
}

// Record keeps the sampled block p of size bytes, with the stack of the
// caller skip frames above Record's caller.
func Record(p, size uintptr, l Labels, skip int) {
	var k bucketKey
	k.n = runtime.Callers(skip+2, k.stk[:])
	k.labels = l
	mu.Lock()
	defer mu.Unlock()
	if old, ok := blocks[p]; ok { // freed without Forget (cannot happen); count it freed
		old.b.Frees++
		old.b.FreeBytes += old.size
		slot(p).Add(-1)
		live.Add(-1)
	}
	b := buckets[k]
	if b == nil {
		b = &Bucket{Stack: append([]uintptr(nil), k.stk[:k.n]...), Labels: l}
		buckets[k] = b
	}
	b.Allocs++
	b.AllocBytes += int64(size)
	blocks[p] = liveBlock{b, int64(size)}
	slot(p).Add(1)
	live.Add(1)
}

// Forget counts the block at p freed if it was sampled. Call it before the
// block is freed: once it is, another goroutine may get the address.
func Forget(p uintptr) {
	if slot(p).Load() == 0 {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if lb, ok := blocks[p]; ok {
		delete(blocks, p)
		lb.b.Frees++
		lb.b.FreeBytes += lb.size
		slot(p).Add(-1)
		live.Add(-1)
	}
}

// Snapshot returns a copy of every bucket and the current rate.
func Snapshot() ([]Bucket, int) {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Bucket, 0, len(buckets))
	for _, b := range buckets {
		out = append(out, *b)
	}
	return out, Rate()
}
