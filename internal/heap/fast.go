package heap

// The allocation hot path: one frame of the engine per operation. An
// owner precomputes a Fast descriptor (its heap, tally, owner number and
// the class table of its alignment) once, when it is made, in its handle
// table Entry; AllocEntry then finds it from the handle and serves a
// cached slot in one pinned section with nothing to validate or compute
// but the table's entry, and hands every other case to the caller's slow
// function having done nothing. FreeFast is the matching free. Callers
// reach both through inlined one-call wrappers (internal/handles), so that
// omp_alloc and omp_free cost this package's frame alone.

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/hooks"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/internal/pcpu"
)

// classTableLen covers every index (need+15)/16 of a small block: need is
// the size plus the user pointer's offset, at most maxSmall when the size
// is within Fast.limit. A power of two, so that the mask the lookup applies
// (a no-op on those indexes) spares the bounds check.
const classTableLen = 4096

// classEntry is a class (low half) and its slot size (high half); noEntry:
// no class holds the need with the table's alignment.
type classEntry uint32

const noEntry classEntry = 0

// classTable maps (need+15)/16 to the class classFor picks for one
// alignment, and its footprint, in one load.
type classTable [classTableLen]classEntry

var (
	tablesMu sync.Mutex
	tables   [bits.UintSize]*classTable // by log2 of the alignment; built once each
)

// tableFor returns the class table of alignment align (a power of two
// ≥ 16), building it on first use. Tables are shared: at most one per
// alignment up to maxSmall, 16 KiB each.
func tableFor(align uintptr) *classTable {
	tablesMu.Lock()
	defer tablesMu.Unlock()
	k := bits.TrailingZeros64(uint64(align))
	if t := tables[k]; t != nil {
		return t
	}
	t := new(classTable)
	for i := range t {
		if c := classFor(uintptr(i)*minAlign, align); c >= 0 && i > 0 {
			// Classes are multiples of 16, so the first class holding
			// i*16 bytes is the first holding any need that rounds up to it.
			t[i] = classEntry(c) | classEntry(classSize[c])<<16
		}
	}
	tables[k] = t
	return t
}

// guardOf returns the guard of a pcache or tallyShard at p (their first
// field): pc.guard would cost a nil check the hot paths need not make (p
// comes from the caches or shards, never nil), as the guard is empty
// outside race builds and its methods load nothing.
func guardOf(p unsafe.Pointer) *pcpu.Guard { return (*pcpu.Guard)(p) }

// The guards guardOf finds.
var (
	_ = [1]struct{}{}[unsafe.Offsetof(pcache{}.guard)]
	_ = [1]struct{}{}[unsafe.Offsetof(tallyShard{}.guard)]
)

// at returns the entry for index i (masked to the table: a no-op on the
// indexes AllocEntry computes), without the bounds and nil checks that
// indexing t would cost (t is never nil in a Fast that serves anything).
func (t *classTable) at(i uintptr) classEntry {
	return *(*classEntry)(unsafe.Add(unsafe.Pointer(t), (i&(classTableLen-1))*unsafe.Sizeof(classEntry(0))))
}

// Fast is an owner's descriptor for the hot path: what AllocSampled and
// AllocGuarded work out at every call, worked out once. It lives in the
// owner's Entry. The zero Fast serves nothing.
//
// Two of its fields change after it is published, each an atomic word the
// hot path loads anyway, so that the two reasons to refuse it cost
// AllocEntry no test of their own: Gate zeroes limit while the leak check
// is on (the size test then sends every size to the general path), and
// Close points t at a tally with no shards (the shard's bounds test, in
// the pinned section, then fails), which is how AllocEntry sees the
// allocator destroyed. A test of the destroyed flag and one of a global
// counter of the leak check cost 6 instructions of the 64 B pair.
type Fast struct {
	h       *Heap
	t       atomic.Pointer[Tally] // the owner's tally; closedTally once Closed
	tally   *Tally                // the owner's tally, for rare (never closed)
	classes *classTable
	off     uintptr        // the user pointer's offset in its slot
	limit   atomic.Uintptr // sizes 1..limit are served here: max, or 0 while gated
	max     uintptr        // sizes 1..max have a class; 0: none
	hdr     uint64         // a block's header as one word, its size 0 (headerWord)
	owner   uint32
}

// headerWord is the header handOut writes for owner at offset off, size 0,
// read as one uint64 (whatever the byte order: sizeShift places the size),
// so that AllocEntry writes it in one store: the size or'ed in.
func headerWord(owner uint32, off uintptr) uint64 {
	hd := header{tag: tag(magicLive, off), meta: owner << 16}
	return *(*uint64)(unsafe.Pointer(&hd))
}

// closedTally is the tally of every closed Fast: no shard for any P.
var closedTally = func() *Tally {
	t := new(Tally)
	s := []*tallyShard{}
	t.shards.Store(&s)
	return t
}()

// Entry is an allocator's entry in the handle table (internal/handles: its
// Head is this type, the first field of every alloc.Allocator): the handle,
// the destroyed flag and the hot path's descriptor, in one object so that
// AllocEntry finds all three through one load.
type Entry struct {
	// Handle is the allocator's omp.h handle: its number (the table
	// index) and, above it, the number's generation. Set before the entry
	// is published, never changed.
	Handle uintptr
	// Destroyed is set once, by omp_destroy_allocator, which then closes
	// Fast (Fast.Close): AllocEntry refuses through the descriptor, the slow
	// function through this flag.
	Destroyed atomic.Bool
	// Fast is the descriptor for AllocEntry (the zero Fast, serving
	// nothing, for all but plain host allocators). Set before the entry is
	// published; afterwards only Gate and Close change it (atomically).
	Fast Fast
}

// Init sets f up for owner (at most maxOwner) allocating from h with
// alignment align (a power of two; below 16 means 16), counted in t. Call
// it before the entry holding f is published.
func (f *Fast) Init(h *Heap, t *Tally, owner uint32, align uintptr) {
	f.h, f.tally, f.classes, f.off, f.max, f.hdr, f.owner = nil, nil, nil, 0, 0, 0, 0
	f.t.Store(closedTally)
	f.limit.Store(0)
	align = max(align, minAlign)
	if h == nil || t == nil || owner > maxOwner || align > maxSmall/2 {
		return // the general path serves everything
	}
	off := offFor(align)
	f.h, f.tally, f.classes, f.off, f.owner = h, t, tableFor(align), off, owner
	f.hdr = headerWord(owner, off)
	f.t.Store(t)
	for need := uintptr(maxSmall); need > off; need -= minAlign {
		if classFor(need, align) >= 0 {
			f.max = need - off
			break
		}
	}
	f.limit.Store(f.max)
}

// Gate sends every allocation from f to the general path while on (the
// leak check, which records each block's stack there), and lets f serve
// again once off. Calls must not overlap (alloc holds its table lock); an
// allocation that loaded the limit before Gate(true) returned may still be
// served here, as one that began before the leak check was turned on.
func (f *Fast) Gate(on bool) {
	if on {
		f.limit.Store(0)
	} else {
		f.limit.Store(f.max)
	}
}

// Close makes f serve nothing, for good: AllocEntry then hands every
// allocation to the slow function, which finds the entry destroyed. Call it
// after setting the entry's Destroyed flag and before the grace period
// (pcpu.Quiesce) that Destroy waits out: a pinned section of AllocEntry
// that loaded the tally before this store ends before the grace period
// does, and every later one loads closedTally (see AllocEntry).
func (f *Fast) Close() { f.t.Store(closedTally) }

// AllocEntry is omp_alloc's whole hot path in one frame: it loads the
// entry at slot (a handle table's slot for handle h), checks that it is h's
// (the generation compare: a stale handle is not), and serves size bytes
// from the P's cache, counted in the owner's tally and counted down to the
// next heap-profile sample, all in one pinned section. Every other case
// (no entry, a stale handle, a size with no class, nothing cached for the
// class, the leak check on, a P without a cache or shard yet, the entry
// destroyed) is slow(e, h, size)'s, called having done nothing, with the
// entry when it is h's (possibly destroyed: slow checks) and nil when
// there is none (the null handle, a stale or unknown one). slow must not
// be nil. It is called from this frame: a helper's frame between them
// cost the general path (a large block) 15 instructions, and inlining one
// with a nil check cost this path 7. Callers inline it (handles.Alloc), so that omp_alloc's
// cached block costs this frame alone.
//
// The descriptor's tally is loaded inside the pinned section, so a
// destroyer needs no mark from allocations (two atomic stores each, an
// XCHG on amd64): it sets the destroyed flag and closes the descriptor
// (Fast.Close: the tally becomes closedTally, whose missing shard fails
// the test this section makes anyway), then waits out a grace period
// (pcpu.Quiesce, a stop-the-world, which cannot begin while a goroutine is
// pinned). Every pinned section that began before the grace period ended
// before it did, its counts visible to the destroyer through the runtime's
// synchronisation of the stop; every one that begins after it runs on a P
// stopped and restarted since the tally's atomic store, and loads
// closedTally. So once Quiesce returns, the owner's live count is final.
// See ARCHITECTURE.md, "The in-flight protocol".
func AllocEntry(slot *atomic.Pointer[Entry], h, size uintptr, slow func(e *Entry, h, size uintptr) uintptr) uintptr {
	// Loads in if statements, beside their tests: an inlined call with no
	// instruction of this function on its line costs a NOP (the inlining
	// mark), and the NOPs were 8 % of the pair's instructions.
	var e *Entry
	if e = slot.Load(); e == nil || e.Handle != h {
		return slow(nil, h, size)
	}
	if size-1 >= e.Fast.limit.Load() { // 0 while gated (the leak check)
		return slow(e, h, size)
	}
	// Nothing but e and size is live across the pin: every load of the
	// descriptor comes after it, so nothing is spilled for it.
	pid := pcpu.Pin()
	f := &e.Fast
	// The tally is closedTally, with no shards, once the entry is closed
	// (destroyed): the bounds test is the destroyed test. Each slice is
	// dereferenced where its length is compared, that load being its nil
	// check.
	var tsp *[]*tallyShard
	var csp *[]*pcache
	if tsp, csp = f.t.Load().shards.Load(), f.h.caches.Load(); uint(pid) >= uint(len(*tsp)) || uint(pid) >= uint(len(*csp)) {
		pcpu.Unpin()
		return slow(e, e.Handle, size) // h: not kept across the pin
	}
	pc, sh := (*csp)[pid], (*tsp)[pid] // before any store: no length reloaded
	en := f.classes.at((size + f.off + minAlign - 1) >> 4)
	guardOf(unsafe.Pointer(pc)).Lock()
	l := pc.list(uintptr(en & 0xffff))
	slot0 := l.head
	if slot0 == 0 {
		guardOf(unsafe.Pointer(pc)).Unlock()
		pcpu.Unpin()
		return slow(e, e.Handle, size)
	}
	l.head = link(slot0)
	l.n--
	if testHooks && FastWindowHook != nil { // a constant false outside the tests' build tag
		FastWindowHook()
	}
	foot := uintptr(en >> 16)
	guardOf(unsafe.Pointer(sh)).Lock()
	sh.allocs++
	b := sh.bytes + int64(size) // compared from the register, not reloaded
	sh.bytes = b
	sh.foot += int64(foot)
	trip := b > sh.next+memsample.Bias()
	guardOf(unsafe.Pointer(sh)).Unlock()
	// handOut's stores, the header in one (f.hdr with the size). The slot's
	// used mark is stored whatever the offset, with no test: at offset 8 the
	// header, stored after it, covers it.
	*(*uint32)(cmem.Ptr(slot0)) = usedMark
	p := slot0 + f.off
	*(*uint64)(cmem.Ptr(p - hdrSize)) = f.hdr | uint64(size)<<sizeShift
	if trip { // the peak, or the heap profile is on
		rare := sh.tripped(int64(size))
		guardOf(unsafe.Pointer(pc)).Unlock()
		pcpu.Unpin()
		if rare != 0 {
			f.rare(p, size, foot, rare)
		}
		return p
	}
	guardOf(unsafe.Pointer(pc)).Unlock()
	pcpu.Unpin()
	return p
}

// list returns the P's free list of class c (< numClasses, which the
// callers' class tables and spans guarantee), without a bounds check, nor
// a nil check of pc (never nil: it comes from the caches, every element
// set): from pc's address, not its field's, which the compiler checks.
func (pc *pcache) list(c uintptr) *freeList {
	return (*freeList)(unsafe.Add(unsafe.Pointer(pc), unsafe.Offsetof(pc.lists)+c*unsafe.Sizeof(freeList{})))
}

// Serves reports whether AllocEntry may serve size bytes from an entry
// with descriptor f: whether the size has a class (not 0, not past the
// small classes). Inlines.
func (f *Fast) Serves(size uintptr) bool { return size-1 < f.limit.Load() }

// rare is allocRare for Alloc, out of its frame.
//
//go:noinline
func (f *Fast) rare(p, size, foot uintptr, rare uint8) {
	allocRare(p, size, foot, f.owner, f.tally, rare)
}

// Follow-up flags of a Tally (SetFollow): what its owner must do when one
// of its blocks is freed, beyond what the heap does. FreeFast loads them in
// its pinned section and hands the tally back only when one is set.
const (
	FollowPartition uint32 = 1 << iota // the owner binds parts per block (partitioner)
	FollowPool                         // the owner keeps a pool_size quota
	FollowClosed                       // the owner is closed (destroyed): its last free releases it
)

// SetFollow sets flags in t's follow-up flags (never cleared: an owner's
// partitioner and quota are fixed, and closing is final).
func (t *Tally) SetFollow(flags uint32) { t.follow.Or(flags) }

// FreeCheckHook and FreeFollowHook, set once by alloc's init (before any
// allocation), are FreeFast's ways out to the allocation layer.
// FreeCheckHook runs before the heap frees p while hooks.FreeChecks says it
// must (deferred frees, the leak check,
// sampled blocks): done means FreeFast returns its error without freeing.
// FreeFollowHook gets every error FreeFast would return (the heap's own
// sentinels, wrapped), and every block whose owner's tally has follow-up
// flags, with the tally and the block's footprint, after the heap counted
// it out; FreeFast returns what it returns. Nil: no checks, the heap's
// errors as they are.
var (
	FreeCheckHook  func(p uintptr, mayDefer bool) (done bool, err error)
	FreeFollowHook func(p uintptr, t *Tally, foot uintptr, err error) error
)

// FreeFast is Free for the allocation layer (alloc.Free and kmp's
// omp_free, which inline their call to it): a small block is freed in this
// one frame, its owner counted and its follow-up flags (SetFollow) read in
// the same pinned section, with every rare case in a helper of its own
// (//go:noinline, so that their frames and spills stay off this path). nil
// is a no-op; mayDefer lets FreeCheckHook defer the free behind queued
// copies. With report nil, FreeFast returns what went wrong; with report
// set, it hands that to report and returns nil (omp_free warns, and a
// caller that only warns then needs no frame of its own around this one).
//
// A closer that sets FollowClosed and then waits out a grace period
// (pcpu.Quiesce) or runs a process-wide barrier (pcpu.Barrier) sees every
// free that read the flags unset counted out: such a free's count-out
// precedes its load of the flags in program order, and its load, which
// missed the closer's store, ran before the barrier reached its thread.
func FreeFast(p uintptr, mayDefer bool, report func(p uintptr, err error)) error {
	if hooks.FreeChecks.Load() != 0 { // HostUses counts there too
		if done, err := freeCheck(p, mayDefer, report); done {
			return err
		}
	}
	pid := pcpu.Pin()
	// The table's common case, without lookup's extent check: a chunk of
	// small blocks (not huge) is a whole granule, so every address the
	// granule maps to is in it. Huge regions go to freeOther, which checks.
	// nil (granule 0, where no chunk is) goes there too. Each way out is a
	// call of its own (one shared cost the common path a copy and a jump).
	var lf *leaf
	if r := p >> (chunkShift + leafBits); r >= uintptr(len(root)) {
		return freeNoChunk(pid, nil, p, report) // unpins
	} else if lf = root[r].Load(); lf == nil {
		return freeNoChunk(pid, nil, p, report) // unpins
	}
	var ch *chunk
	if ch = lf[(p>>chunkShift)&(1<<leafBits-1)].Load(); ch == nil || ch.huge != nil {
		// A huge region's free, called from here: through freeNoChunk's
		// frame it cost the 4 MiB pair 8 instructions.
		if err := freeRegion(pid, ch, p); err != nil { // unpins
			return reported(p, err, report)
		}
		return nil
	}
	s := ch.pages[((p-ch.base)>>pageShift)&(pagesPerChunk-1)].Load()
	if s == nil || s.state.Load() != spanSmall {
		return freeOtherR(pid, ch, p, report) // unpins
	}
	first, hd := s.base+hdrSize, hdr(p) // one line: see AllocEntry's loads
	slot := first + uintptr(uint64(p-first)*s.divMul>>divShift)*s.size
	if p%minAlign != 0 || p < first || p-slot < hdrSize {
		return freeRefused(s, p, report) // unpins
	}
	// The swap that claims the block is the path's one locked instruction,
	// and the loads after it wait for it: every load the free's stores need
	// (the owner's tally and shard, the P's cache) is made before it, so
	// that they overlap it instead of following it (0.6 ns of the 64 B
	// pair here). The owner is read before the swap: a read of a block the
	// swap then refuses is only discarded. The swap compares with the tag
	// as read, once that read is checked against the slot's geometry, so
	// that it need not wait for the slot arithmetic (0.4 ns): a tag changed
	// in between fails it, as a racing free does.
	h := ch.heap
	var t *Tally // the owner's, before the block is counted out (see FreeCounted)
	var tsp *[]*tallyShard
	var csp *[]*pcache
	meta := hd.meta // the owner and the size, in one load
	if t = talliesByOwner[meta>>16].Load(); t == nil {
		return h.freeSlotSwap(pid, s, p, slot, t, report) // unpins
	}
	// Each slice is dereferenced where its length is compared: that load is
	// the nil check (dereferenced before, each cost a check of its own).
	if tsp, csp = t.shards.Load(), h.caches.Load(); uint(pid) >= uint(len(*tsp)) || uint(pid) >= uint(len(*csp)) {
		return h.freeSlotSwap(pid, s, p, slot, t, report) // unpins
	}
	pc, sh := (*csp)[pid], (*tsp)[pid]
	l := pc.list(uintptr(s.class))
	// obs^(magicLive^magicFree)<<16 is tag(magicFree, p-slot) once obs is
	// tag(magicLive, p-slot), computed from obs alone.
	if obs := atomic.LoadUint32(&hd.tag); obs != tag(magicLive, p-slot) || !atomic.CompareAndSwapUint32(&hd.tag, obs, obs^(magicLive^magicFree)<<16) {
		return freeRefused(s, p, report) // unpins
	}
	guardOf(unsafe.Pointer(pc)).Lock()
	guardOf(unsafe.Pointer(sh)).Lock()
	sh.frees++
	sh.bytes -= int64(meta & 0xffff)
	sh.foot -= int64(s.size)
	guardOf(unsafe.Pointer(sh)).Unlock()
	setLink(slot, l.head)
	l.head = slot
	l.n++
	if l.n > s.cap {
		return freeOver(pc, s, p, t, report) // unlocks, unpins
	}
	guardOf(unsafe.Pointer(pc)).Unlock()
	if t.follow.Load() != 0 {
		return freeFollowUnpin(p, t, s.size, report) // unpins
	}
	pcpu.Unpin() // nothing live across it
	return nil
}

// freeOther and freeFollow are freeOtherR and freeFollowR without a
// report: the huge regions' free (freeRegion) returns its error to
// FreeFast, which hands it to reported.
func freeOther(pid int, ch *chunk, p uintptr) error { return freeOtherR(pid, ch, p, nil) }

func freeFollow(p uintptr, t *Tally, foot uintptr, err error) error {
	return freeFollowR(p, t, foot, err, nil)
}

// freeNoChunk is FreeFast for a pointer the root of the table has no leaf
// for (ch nil). The caller is pinned; it unpins.
//
//go:noinline
func freeNoChunk(pid int, ch *chunk, p uintptr, report func(p uintptr, err error)) error {
	if err := freeRegion(pid, ch, p); err != nil { // unpins
		return reported(p, err, report)
	}
	return nil
}

// reported is FreeFast's error err for p, handed to report when there is
// one (and nil returned).
//
//go:noinline
func reported(p uintptr, err error, report func(p uintptr, err error)) error {
	if report != nil {
		report(p, err)
		return nil
	}
	return err
}

// freeOver is FreeFast's tail when the P's list of class c went over its
// capacity: half of it goes back to the central lists. The caller is
// pinned and holds pc's guard; freeOver releases both.
//
//go:noinline
func freeOver(pc *pcache, s *span, p uintptr, t *Tally, report func(uintptr, error)) error {
	h, foot := s.chunk.heap, s.size // not kept live across FreeFast's swap
	spill := pc.spillHalf(s.class)
	pc.guard.Unlock()
	fl := t.follow.Load()
	pcpu.Unpin()
	h.returnSpill(spill)
	if fl != 0 {
		return freeFollowR(p, t, foot, nil, report)
	}
	return nil
}

// freeFollowUnpin unpins, then hands a block whose owner has follow-up
// flags to FreeFollowHook (which may wait out a grace period: never
// pinned).
//
//go:noinline
func freeFollowUnpin(p uintptr, t *Tally, foot uintptr, report func(uintptr, error)) error {
	pcpu.Unpin()
	return freeFollowR(p, t, foot, nil, report)
}

// freeCheck runs FreeCheckHook for FreeFast; a nil p is done.
//
//go:noinline
func freeCheck(p uintptr, mayDefer bool, report func(uintptr, error)) (done bool, err error) {
	if p == 0 {
		return true, nil
	}
	if f := FreeCheckHook; f != nil {
		done, err = f(p, mayDefer)
		if err != nil && report != nil {
			report(p, err)
			err = nil
		}
		return done, err
	}
	return false, nil
}

// freeFollowR hands FreeFast's error, or a block whose owner has follow-up
// flags, to FreeFollowHook, and what that returns to report when set.
//
//go:noinline
func freeFollowR(p uintptr, t *Tally, foot uintptr, err error, report func(uintptr, error)) error {
	if f := FreeFollowHook; f != nil {
		err = f(p, t, foot, err)
	}
	if err != nil && report != nil {
		report(p, err)
		return nil
	}
	return err
}

// freeOtherR is FreeFast for a pointer that is not in a small span of a
// granule's chunk: nil, a huge region (checked against its extent here), a
// large or mixed span, free pages, an address past the table, or no chunk
// at all. The caller is pinned to P pid; it unpins.
//
//go:noinline
func freeOtherR(pid int, ch *chunk, p uintptr, report func(uintptr, error)) error {
	if p == 0 {
		pcpu.Unpin()
		return nil
	}
	if ch == nil {
		if ch = lookupHigh(p); ch == nil {
			pcpu.Unpin()
			return freeFollowR(p, nil, 0, foreign(p), report)
		}
	}
	if ch.huge != nil && p-ch.base >= ch.size { // the rest of a huge region's last granule
		pcpu.Unpin()
		return freeFollowR(p, nil, 0, foreign(p), report)
	}
	var b Block
	var t *Tally
	var err error
	if s := ch.spanAt(p); s == nil {
		pcpu.Unpin()
		err = ch.heap.notAtBlock(ch, p)
	} else if st := s.state.Load(); st == spanSmall {
		// Only a huge region's chunk came here with a small span: none has one.
		pcpu.Unpin()
		err = invalid(p)
	} else {
		b, t, err = ch.heap.freeLarge(pid, ch, s, p) // unpins
	}
	if err != nil {
		return freeFollowR(p, nil, 0, err, report)
	}
	if t != nil && t.follow.Load() != 0 {
		return freeFollowR(p, t, b.Footprint, nil, report)
	}
	return nil
}

// freeRefused explains why FreeFast's check of a small block failed: a
// double free, an interior or misaligned pointer, or a racing free that
// won the header's compare-and-swap (or nil, in the unlikely case of a
// small span in granule 0). The caller is pinned; it unpins.
//
//go:noinline
func freeRefused(s *span, p uintptr, report func(uintptr, error)) error {
	if p == 0 {
		pcpu.Unpin()
		return nil
	}
	if staleFreeHook != nil {
		staleFreeHook()
	}
	_, bad := smallState(s, p)
	pcpu.Unpin()
	if bad != smallLive {
		return freeFollowR(p, nil, 0, smallErr(bad, p), report)
	}
	return freeFollowR(p, nil, 0, doubleFree(p), report) // a racing free won the CAS
}

// freeSlotRare is FreeFast's tail when the block has no tally or the P no
// cache or shard yet (GOMAXPROCS grew): freeSlot's general case. The
// caller is pinned to P pid; it unpins.
//
//go:noinline
func (h *Heap) freeSlotRare(pid, c int, p, slot uintptr, t *Tally, size, foot uintptr, report func(uintptr, error)) error {
	h.freeSlot(pid, c, slot, t, size, foot) // unpins
	if t != nil && t.follow.Load() != 0 {
		return freeFollowR(p, t, foot, nil, report)
	}
	return nil
}

// freeSlotSwap is FreeFast's tail for a block whose owner has no tally or
// whose P has no cache or shard yet: the compare-and-swap that claims it,
// then freeSlotRare. The caller is pinned to P pid; it unpins.
//
//go:noinline
func (h *Heap) freeSlotSwap(pid int, s *span, p, slot uintptr, t *Tally, report func(uintptr, error)) error {
	hd := hdr(p)
	if !atomic.CompareAndSwapUint32(&hd.tag, tag(magicLive, p-slot), tag(magicFree, p-slot)) {
		return freeRefused(s, p, report) // unpins
	}
	return h.freeSlotRare(pid, s.class, p, slot, t, hd.size(), s.size, report) // unpins
}

// spillHalf unlinks half of the P's list of class c, over its capacity, and
// returns it for returnSpill. The caller holds pc's guard.
//
//go:noinline
func (pc *pcache) spillHalf(c int) uintptr {
	l := &pc.lists[c]
	k := l.n / 2
	head, tail := l.head, l.head
	for i := int32(1); i < k; i++ {
		tail = link(tail)
	}
	l.head = link(tail)
	l.n -= k
	setLink(tail, 0)
	return head
}

// returnSpill gives a list spillHalf took back to the central lists.
//
//go:noinline
func (h *Heap) returnSpill(head uintptr) {
	h.mu.Lock()
	h.returnList(head)
	h.unlock()
}

func foreign(p uintptr) error    { return fmt.Errorf("%w: %#x", ErrForeign, p) }
func invalid(p uintptr) error    { return fmt.Errorf("%w: %#x", ErrInvalid, p) }
func doubleFree(p uintptr) error { return fmt.Errorf("%w: %#x", ErrDoubleFree, p) }
