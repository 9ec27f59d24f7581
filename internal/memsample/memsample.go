// Package memsample samples allocations for the heap profile of package
// memprof, the way Go's runtime samples its own heap: one allocation per
// Rate bytes on average, the distance to the next sample drawn from an
// exponential distribution (so that every byte has the same chance, whatever
// the sizes), counted down per P. It keeps the stack and labels of each
// sampled block until it is freed, and per stack and labels the totals of
// sampled allocations and frees.
//
// The countdown of the hot paths lives in the heap's per-P tally shards
// (a Countdown each), taken in the pinned section that pops the block, so
// that sampling costs no second pin; alloc calls Tick for the other paths
// (On first: one load), Record for a sampled block, Tracking (one load)
// before each free, Forget while sampled blocks are live.
package memsample

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/hooks"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

var (
	// gen is the SetRate in force while sampling is on, 0 while it is off:
	// one load tells a countdown both whether to count and whether it was
	// drawn under the current rate.
	gen   atomic.Int64
	rate  atomic.Int64 // mean bytes between samples; 0 off
	live  atomic.Int64 // sampled blocks not yet freed: Forget's callers ask
	epoch atomic.Int64 // bumped by SetRate
	// bias is 0 while sampling is off and hugely negative while it is on
	// (stored after gen): the heap's hot paths add it to the live-bytes
	// mark they compare against for their peak samples, so that one
	// compare, whose branch they already had, also tells them to count
	// down to the next profile sample, and sampling off costs them one
	// load (see heap.SampleHook).
	bias int64 // atomic: sync/atomic's functions (Bias says why)
)

// Bias returns 0 while sampling is off and math.MinInt64/4 while it is on:
// x > mark+Bias() holds for every x and mark a program can count to while
// it is on (both within ±2^60). It loads with atomic.LoadInt64 rather
// than an atomic.Int64's Load: the method, inlined into the heap's hot
// path, left a NOP there (its inlining mark).
func Bias() int64 { return atomic.LoadInt64(&bias) }

// On reports whether sampling is on (a plain load on amd64 and arm64).
func On() bool { return gen.Load() != 0 }

// Tracking reports whether any sampled block is live, so a free must ask
// Forget.
func Tracking() bool { return live.Load() != 0 }

// Rate returns the mean number of bytes between samples (0: off).
func Rate() int { return int(rate.Load()) }

// SetRate sets the mean number of bytes between samples; 0 stops sampling
// (blocks already sampled stay in the profile until freed). Every
// countdown redraws under the new rate at its next allocation (it sees a
// new gen), so that the rate holds from then on.
func SetRate(n int) {
	if n < 0 {
		n = 0
	}
	mu.Lock()
	defer mu.Unlock()
	rate.Store(int64(n))
	e := epoch.Add(1)
	if n == 0 {
		e = 0
	}
	gen.Store(e)
	if e == 0 {
		atomic.StoreInt64(&bias, 0)
	} else {
		atomic.StoreInt64(&bias, math.MinInt64/4) // after gen: whoever sees it sees the gen
	}
}

// Countdown is one stream's distance to its next sample. Its owner keeps
// it where only one goroutine touches it at a time: a P's shard, used
// while pinned to that P (the heap's tally shards, this package's own for
// Tick). Each stream of allocations counted down apart is sampled at the
// rate on its own: the draws are exponential (memoryless), so every byte
// has the same chance, whichever stream counts it.
type Countdown struct {
	next int64  // bytes until the next sample
	gen  int64  // the gen the countdown was drawn under
	rng  uint64 // xorshift state
}

// Gen returns the gen a countdown is drawn under (0: sampling off); pass
// it to Take.
func Gen() int64 { return gen.Load() }

// Take counts an allocation of size bytes down under g, Gen's value (not
// 0: the caller skips the countdown while sampling is off), and reports
// whether to sample it. It is on the hot path of every allocation while
// sampling is on: a subtract and two compares until the countdown runs out.
func (c *Countdown) Take(size, g int64) bool {
	c.next -= size
	if c.next >= 0 && c.gen == g {
		return false
	}
	return c.cross(size, g)
}

// cross draws the next countdown once this one ran out (or was drawn under
// another rate), and reports whether the allocation is sampled.
//
//go:noinline
func (c *Countdown) cross(size, g int64) bool {
	if c.gen != g {
		// First countdown under this rate: draw one and count this
		// allocation against it.
		c.gen = g
		if c.rng == 0 {
			c.rng = (uint64(time.Now().UnixNano())^uint64(uintptr(unsafe.Pointer(c))))*0x9e3779b97f4a7c15 | 1
		}
		if c.next = c.draw() - size; c.next >= 0 {
			return false
		}
	}
	c.next = c.draw()
	return rate.Load() > 0
}

// draw returns an exponentially distributed distance with mean Rate, as
// the runtime's fastexprand does for MemProfileRate.
func (c *Countdown) draw() int64 {
	r := rate.Load()
	if r <= 0 {
		return 1 << 40 // off: look again after a TiB
	}
	if r == 1 {
		return 0 // every allocation, as MemProfileRate = 1
	}
	x := c.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	c.rng = x
	u := (float64(x>>11) + 0.5) / (1 << 53) // in (0, 1)
	d := -math.Log(u) * float64(r)
	if d > 1<<40 {
		d = 1 << 40
	}
	return int64(d)
}

// shard is one P's countdown for Tick, padded to its own cache lines.
type shard struct {
	guard pcpu.Guard
	cd    Countdown
	_     [128 - unsafe.Sizeof(Countdown{}) - unsafe.Sizeof(pcpu.Guard{})]byte
}

var (
	shards atomic.Pointer[[]shard]
	slowMu sync.Mutex
	slow   Countdown // for Ps past the shards (GOMAXPROCS grew)
)

func init() {
	s := make([]shard, runtime.GOMAXPROCS(0))
	shards.Store(&s)
}

// Tick counts an allocation of size bytes made outside the heap's hot
// paths (which count down in their own tally shards) and reports whether
// to sample it.
func Tick(size uintptr) bool {
	pid := pcpu.Pin()
	if s := *shards.Load(); uint(pid) < uint(len(s)) {
		sh := &s[pid]
		sh.guard.Lock()
		hit := false
		if g := gen.Load(); g != 0 {
			hit = sh.cd.Take(int64(size), g)
		}
		sh.guard.Unlock()
		pcpu.Unpin()
		return hit
	}
	pcpu.Unpin()
	slowMu.Lock()
	defer slowMu.Unlock()
	g := gen.Load()
	return g != 0 && slow.Take(int64(size), g)
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
		hooks.FreeChecks.Add(-1)
	}
	b := buckets[k]
	if b == nil {
		b = &Bucket{Stack: append([]uintptr(nil), k.stk[:k.n]...), Labels: l}
		buckets[k] = b
	}
	b.Allocs++
	b.AllocBytes += int64(size)
	hooks.FreeChecks.Add(1) // free must Forget it (see hooks.FreeChecks); before the block is live
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
		hooks.FreeChecks.Add(-1)
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
