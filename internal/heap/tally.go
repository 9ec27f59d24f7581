package heap

// Per-owner counters, kept per P and summed when read. They live here, not
// in the allocator, so that Alloc and Free count a block inside the same
// pinned section that takes it from or gives it to the P's cache: one pin
// per operation, not two. Free learns the owner only from the block, so
// owners register their tally under their id.

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// Tally is one owner's counters: one shard per P, written only by the
// goroutine pinned to that P, summed by Sum.
type Tally struct {
	shards atomic.Pointer[[]*tallyShard]
	peak   atomic.Int64
	owner  unsafe.Pointer // the owner's object, for FreeCounted's callers (SetOwner)
	follow atomic.Uint32  // what the owner does after a free (SetFollow; FreeFast reads it)
}

// SetOwner records the object that owns t (before t is registered). Free
// returns the tally it counted a block out of, and so names that object: an
// owner id can be registered anew by the time the caller reads it, a tally
// cannot.
func (t *Tally) SetOwner(p unsafe.Pointer) { t.owner = p }

// Owner returns what SetOwner recorded.
func (t *Tally) Owner() unsafe.Pointer { return t.owner }

// tallyShard is padded to 128 bytes, a Go size class whose objects are
// 128-byte aligned, so two Ps never write the same line, nor the adjacent
// pair of lines the prefetcher fetches together.
type tallyShard struct {
	guard     pcpu.Guard
	allocs    uint64
	frees     uint64
	bytes     int64
	foot      int64
	fallbacks uint64
	next      int64 // bytes past which the peak is sampled: PeakStep past the last sample (newShard)
	// inflight counts operations begun on this P (Enter) less those ended
	// on it (Exit); only the sum over Ps means anything. Enter and InFlight
	// form a store-then-load handshake with the owner's closed flag (see
	// Enter); every access to it is atomic.
	inflight int64
	// cd is this owner's countdown to the next heap-profile sample on this
	// P, counted down with the block's count in the same pinned section
	// (see Sample).
	cd memsample.Countdown
	_  [128 - 7*8 - unsafe.Sizeof(memsample.Countdown{}) - unsafe.Sizeof(pcpu.Guard{})]byte
}

// newShard returns a shard that samples the peak once its P's live bytes
// pass PeakStep (the next it samples is PeakStep past each sample).
func newShard() *tallyShard { return &tallyShard{next: PeakStep} }

// SampleHook, set once by alloc's init (before any allocation), records
// blocks for the heap profile (package memsample). The hot paths
// (AllocSampled, AllocGuarded) count each block down to the next sample in
// the tally shard they count it in, under the pin they already hold (one
// load while profiling is off, a subtract and two compares while it is on,
// where a Tick of its own would pin the P a second time), and call it,
// after the pinned section, only for a block the countdown takes (counted
// true) or, while profiling is on, one they did not count down (counted
// false: a refill, a huge block; the hook asks memsample's Tick). Their
// callers test nothing: profiling off costs the hot paths one load and a
// branch that is never taken.
var SampleHook func(p, size uintptr, owner uint32, counted bool)

// PeakStep is how much a P's live bytes grow between two samples of the
// peak.
const PeakStep = 64 << 10

// TallySum is a Tally's counters summed over every P.
type TallySum struct {
	Allocs, Frees uint64
	Bytes, Foot   int64 // requested bytes and footprint of live blocks
	Fallbacks     uint64
}

// Live returns the number of live blocks.
func (s TallySum) Live() int64 { return int64(s.Allocs - s.Frees) }

// NewTally returns a tally with one shard per P.
func NewTally() *Tally {
	t := new(Tally)
	s := make([]*tallyShard, runtime.GOMAXPROCS(0))
	for i := range s {
		s[i] = newShard()
	}
	t.shards.Store(&s)
	return t
}

// countPinned counts an allocation or a free on P pid; the caller is pinned
// to it. It reports false when the P
// has no shard yet (GOMAXPROCS grew): the caller then counts with Count,
// unpinned. sample says the peak should be sampled (after unpinning). The
// hot paths count with countHot instead.
func (t *Tally) countPinned(pid int, alloc bool, bytes, foot int64) (ok, sample bool) {
	s := *t.shards.Load()
	if pid >= len(s) {
		return false, false
	}
	sh := s[pid]
	sh.guard.Lock()
	if alloc {
		sh.allocs++
		sh.bytes += bytes
		sh.foot += foot
		if sh.bytes > sh.next {
			sh.next = sh.bytes + PeakStep
			sample = true
		}
	} else {
		sh.frees++
		sh.bytes -= bytes
		sh.foot -= foot
	}
	sh.guard.Unlock()
	return true, sample
}

// What the hot paths leave to allocRare, after their pinned section (0:
// nothing, the common case: one variable live across the unpin).
const (
	rareUncounted uint8 = 1 << iota // not counted in the pinned section
	rarePeak                        // the peak is to be sampled
	rareTake                        // the heap profile samples the block
)

// countHot is countPinned of an allocation on the hot paths (AllocSampled,
// AllocGuarded), which count it down to the next heap-profile sample too.
// sh is the P's shard (nil: none yet, count with CountAlloc). trip says the
// live bytes passed the shard's next (the peak is to be sampled) or the
// heap profile is on (memsample.Bias): the caller, still pinned, does what
// tripped does. Sampling off, that is the compare countPinned makes anyway,
// against one more load.
func (t *Tally) countHot(pid int, bytes, foot int64) (sh *tallyShard, trip bool) {
	s := *t.shards.Load()
	if pid >= len(s) {
		return nil, false
	}
	sh = s[pid]
	sh.guard.Lock()
	sh.allocs++
	sh.bytes += bytes
	sh.foot += foot
	trip = sh.bytes > sh.next+memsample.Bias()
	sh.guard.Unlock()
	return sh, trip
}

// tripped follows countHot's trip, pinned to the shard's P: rarePeak when
// the peak is to be sampled, rareTake when the heap profile samples this
// allocation of size bytes. AllocSampled writes it out: while profiling it
// runs at every allocation, and a call there cost the default allocator's
// 64 B pair 22 instructions more (cachegrind); AllocGuarded calls it, which
// kept its pair with profiling off at the 515 it was (written out: 518).
//
//go:noinline
func (sh *tallyShard) tripped(size int64) (rare uint8) {
	sh.guard.Lock()
	if sh.bytes > sh.next {
		sh.next = sh.bytes + PeakStep
		rare |= rarePeak
	}
	if g := memsample.Gen(); g != 0 && sh.cd.Take(size, g) {
		rare |= rareTake
	}
	sh.guard.Unlock()
	return rare
}

// count counts an allocation or a free from unpinned code.
func (t *Tally) count(alloc bool, bytes, foot int64) {
	for {
		ok, sample := t.countPinned(pcpu.Pin(), alloc, bytes, foot)
		pcpu.Unpin()
		if ok {
			if sample {
				t.SamplePeak()
			}
			return
		}
		t.grow()
	}
}

// CountAlloc counts an allocation of bytes occupying foot made outside the
// heap (device memory).
func (t *Tally) CountAlloc(bytes, foot int64) { t.count(true, bytes, foot) }

// CountFree counts the free of a block counted with CountAlloc.
func (t *Tally) CountFree(bytes, foot int64) { t.count(false, bytes, foot) }

// Resize counts a live block's requested size changing from old to size in
// place (its footprint does not change).
func (t *Tally) Resize(old, size int64) {
	for {
		pid := pcpu.Pin()
		if s := *t.shards.Load(); pid < len(s) {
			sh := s[pid]
			sh.guard.Lock()
			sh.bytes += size - old
			sample := sh.bytes > sh.next
			if sample {
				sh.next = sh.bytes + PeakStep
			}
			sh.guard.Unlock()
			pcpu.Unpin()
			if sample {
				t.SamplePeak()
			}
			return
		}
		pcpu.Unpin()
		t.grow()
	}
}

// Fallback counts an allocation that went to the fallback.
func (t *Tally) Fallback() {
	for {
		pid := pcpu.Pin()
		if s := *t.shards.Load(); pid < len(s) {
			s[pid].guard.Lock()
			s[pid].fallbacks++
			s[pid].guard.Unlock()
			pcpu.Unpin()
			return
		}
		pcpu.Unpin()
		t.grow()
	}
}

// Enter begins an operation on the owner unless closed is set: it counts
// the operation in flight on this P, then reads closed; when it is set it
// takes the count back on the same P and reports false. Each successful
// Enter must be matched by one Exit, on any P.
//
// Why the closer's wait (InFlight after setting closed) never reads a false
// zero. Enter's increment must be visible to the closer's loads of the
// shards, or Enter's load of closed must see the closer's store: Dekker's
// handshake, which needs a full barrier between each side's store and its
// load. Every access in it is a sync/atomic operation (addMark: an atomic
// store to the P's own shard; atomic adds without pcpu.HasBarrier), and Go's
// memory model makes all atomic operations sequentially consistent: in their
// one total order either the mark precedes the closer's load of the shard
// (which sees it), or the closer's store of closed precedes Enter's load
// (which sees it). No plain store and no machine's store order is relied
// on, so it holds on arm64 and against any compiler reordering alike. An
// Enter that saw closed set undoes its increment on the same shard, so the
// closer sees both, neither or only the increment (a positive sum: it waits
// again). Each shard's value is thus at least the successful Enters counted
// there less the Exits done there, and the sum over shards is zero only
// once every successful Enter has had its Exit, wherever each ran. The
// unmark, an atomic store after the operation's counts, also makes those
// counts visible to the closer that loads it.
func (t *Tally) Enter(closed *atomic.Bool) bool {
	for {
		pid := pcpu.Pin()
		if s := *t.shards.Load(); pid < len(s) {
			sh := s[pid]
			var ok bool
			if pcpu.HasBarrier {
				addMark(&sh.inflight, 1)
				if ok = !closed.Load(); !ok {
					addMark(&sh.inflight, -1)
				}
			} else {
				atomic.AddInt64(&sh.inflight, 1)
				if ok = !closed.Load(); !ok {
					atomic.AddInt64(&sh.inflight, -1)
				}
			}
			pcpu.Unpin()
			return ok
		}
		pcpu.Unpin()
		t.grow()
	}
}

// Exit ends an operation begun with Enter.
func (t *Tally) Exit() {
	for {
		pid := pcpu.Pin()
		if s := *t.shards.Load(); pid < len(s) {
			// This P's own shard, even when GOMAXPROCS grew since Enter: a
			// plain decrement of another P's shard could undo its writes.
			if pcpu.HasBarrier {
				addMark(&s[pid].inflight, -1)
			} else {
				atomic.AddInt64(&s[pid].inflight, -1)
			}
			pcpu.Unpin()
			return
		}
		pcpu.Unpin()
		t.grow()
	}
}

// InFlight returns the operations begun with Enter and not yet ended,
// summed over every P. Called after closed is set, a zero is final (see
// Enter). Where pcpu.HasBarrier it first runs a process-wide barrier (a few
// microseconds; a collection where a sandbox refuses membarrier): the
// counts of frees, stored plainly on each P with no mark, are then visible
// to the caller's later reads (Destroy's live count), and a free that read
// the owner's closed flag unset did so before the barrier. It is for the
// rare closing side only.
func (t *Tally) InFlight() (n int64) {
	if pcpu.HasBarrier {
		pcpu.Barrier()
	}
	for _, sh := range *t.shards.Load() {
		n += atomic.LoadInt64(&sh.inflight)
	}
	return n
}

func (t *Tally) grow() {
	old := t.shards.Load()
	n := max(runtime.GOMAXPROCS(0), len(*old)+1) // +1: never spin, whatever the P index was
	s := make([]*tallyShard, n)
	copy(s, *old) // the shards themselves stay: no count is lost
	for i := len(*old); i < n; i++ {
		s[i] = newShard()
	}
	t.shards.CompareAndSwap(old, &s) // losing the race is fine: the winner grew it
}

// Sum returns the counters summed over every P.
func (t *Tally) Sum() (st TallySum) {
	for i, s := 0, *t.shards.Load(); i < len(s); i++ {
		sh := s[i]
		pcpu.Pin() // guards are held only while pinned (see pcpu.Guard)
		sh.guard.Lock()
		st.Allocs += sh.allocs
		st.Frees += sh.frees
		st.Bytes += sh.bytes
		st.Foot += sh.foot
		st.Fallbacks += sh.fallbacks
		sh.guard.Unlock()
		pcpu.Unpin()
	}
	return st
}

// SamplePeak raises the peak to the live bytes now.
func (t *Tally) SamplePeak() {
	b := t.Sum().Bytes
	for {
		p := t.peak.Load()
		if b <= p || t.peak.CompareAndSwap(p, b) {
			return
		}
	}
}

// Peak returns the highest live bytes sampled.
func (t *Tally) Peak() int64 { return t.peak.Load() }

// talliesByOwner holds the tallies of the owners, indexed by owner id
// (every id fits a small block's header: at most maxOwner), read without
// locks: a fixed array of atomic pointers, so that a free indexes it with
// the header's owner and no bounds check or table load (512 KiB of zero
// pages until owners register).
var talliesByOwner [maxOwner + 1]atomic.Pointer[Tally]

// SetTally makes Free count the blocks of owner (at most 65535) in t (nil:
// count nowhere). An owner registers before it allocates.
func SetTally(owner uint32, t *Tally) {
	if owner > maxOwner {
		panic(fmt.Sprintf("heap: owner %d does not fit a block header", owner)) // a bug, not input
	}
	talliesByOwner[owner].Store(t)
}

func tallyOf(owner uint32) *Tally {
	if owner > maxOwner {
		return nil
	}
	return talliesByOwner[owner].Load()
}
