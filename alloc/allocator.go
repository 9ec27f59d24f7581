package alloc

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/handles"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/pcpu"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/warn"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// handle is an allocator's number, the omp_allocator_handle_t of omp.h:
// 0 the null allocator, 1..8 and 100..102 the predefined allocators
// (internal/predef's numbers), larger numbers allocators made at run time.
// Package kmp hands them to C-style code; internal/ompglue is its way from
// one to the *Allocator (a Go program holds the *Allocator).
type handle uintptr

const (
	firstRuntimeHandle handle = 1024
	// maxHandle is the largest handle number (the table index, the owner
	// in blocks): a small block's 8-byte header keeps its owner in 16 bits.
	// A runtime allocator's handle is its number plus its generation
	// shifted above those bits (see NewFromTraits).
	maxHandle handle = 1<<16 - 1
	genShift         = 16
)

// Interface is what a library that embeds ompalloc needs of an allocator;
// *Allocator implements it.
type Interface interface {
	Alloc(size uintptr) (unsafe.Pointer, error)
	AlignedAlloc(alignment, size uintptr) (unsafe.Pointer, error)
	Calloc(nmemb, size uintptr) (unsafe.Pointer, error)
	Realloc(p unsafe.Pointer, size uintptr) (unsafe.Pointer, error)
	Free(p unsafe.Pointer) error
}

var _ Interface = (*Allocator)(nil)

// Allocator allocates memory with fixed traits from a memory space. It is
// safe for concurrent use.
type Allocator struct {
	// head must stay first: handles.Live returns a pointer to it, which is
	// the allocator's (internal/ompglue converts it). Its handle is the number (id) and,
	// above it, the number's generation; Destroyed is set by Destroy.
	head   handles.Head
	id     uint32 // the handle table index; the owner recorded in blocks
	ms     memspace.ID
	traits traits.Set
	name   string

	// backend: a heap for host memory (plain or pinned), or a device for
	// target memory spaces.
	heap   *heap.Heap
	pool   *pinnedPool // a pinned pool with a heap per NUMA node (heap is its first); nil otherwise
	target *targetBackend

	fb *Allocator // where a failed allocation goes next; nil = nowhere

	align    uintptr         // max(trait, 16)
	plain    bool            // a host heap with no pool: alloc's fast path applies
	ptn      *partitionerUse // partition=partitioner: its parts are bound per block
	poolUsed atomic.Int64
	shards   shards
	// quiesced is set by Destroy once its grace period has passed: from
	// then on no hot-path allocation that missed the destroyed flag can
	// still be counting, and the last free needs no grace period of its own.
	quiesced atomic.Bool

	pinFb pinFallback // what to say when a failed pin first falls back
}

// handle returns the allocator's omp.h handle.
func (a *Allocator) handle() handle { return handle(a.head.Handle) }

// The head is at offset 0 (a build error otherwise), and handle numbers
// are the handles package's.
var (
	_ [0]struct{} = [unsafe.Offsetof(Allocator{}.head)]struct{}{}
	_ [0]struct{} = [maxHandle - handles.Mask]struct{}{}
)

// allocatorAt is the allocator whose head e is (nil for nil).
func allocatorAt(e unsafe.Pointer) *Allocator { return (*Allocator)(e) }

// Memspace returns the memory space the allocator draws from.
func (a *Allocator) Memspace() memspace.ID { return a.ms }

// Traits returns the allocator's resolved traits.
func (a *Allocator) Traits() traits.Set { return a.traits }

// String names the allocator: "omp_default_mem_alloc" or
// "allocator#1025(omp_default_mem_space, pinned)".
func (a *Allocator) String() string { return a.name }

// The handle table (internal/handles) maps handle numbers (the owner ids
// in block headers) to allocators. Readers index it without locking.
//
// A destroyed allocator's number is reused late and under a new generation:
// freed numbers wait in a FIFO until reuseDelay of them wait (or no number
// was never used), and each reuse bumps the number's generation, which is
// part of the handle. A stale handle (an omp_allocator_handle_t kept past
// omp_destroy_allocator) then names no live allocator and is refused with a
// warning, instead of allocating from whichever allocator got its number.
var (
	tableMu    sync.Mutex // held to change the table
	freeIDs    []handle   // numbers (generation 0) waiting for reuse, oldest first
	gens       []uint32   // each number's next generation
	nextID     = firstRuntimeHandle
	reuseDelay = 256 // freed numbers kept waiting before the oldest is reused
	initOnce   sync.Once
)

// lookup returns the live allocator with handle h. The null handle resolves
// to the default allocator.
func lookup(h handle) (*Allocator, bool) {
	// The common case, which kmp's omp_alloc inlines: a live allocator's
	// own handle (a stale one has an older generation). The null handle,
	// and any handle before the first allocator is made, go the slow way.
	if a := allocatorAt(handles.Live(uintptr(h))); a != nil {
		return a, true
	}
	return lookupSlow(h)
}

func lookupSlow(h handle) (*Allocator, bool) {
	initOnce.Do(initPredefined)
	if h == predef.Null {
		return Default(), true
	}
	t := handles.Table()
	if uintptr(h&maxHandle) >= uintptr(len(t)) {
		return nil, false
	}
	a := allocatorAt(unsafe.Pointer(t[h&maxHandle]))
	if a == nil || a.handle() != h || a.head.Destroyed.Load() {
		return nil, false
	}
	return a, true
}

func owner(id uint32) *Allocator {
	t := handles.Table()
	if int(id) < len(t) {
		return allocatorAt(unsafe.Pointer(t[id]))
	}
	return nil
}

// allocators calls f for every allocator in the table, in handle order.
func allocators(f func(*Allocator)) {
	for _, e := range handles.Table() {
		if e != nil {
			f(allocatorAt(unsafe.Pointer(e)))
		}
	}
}

// ownerOfTally returns the allocator whose tally t is (nil for nil).
func ownerOfTally(t *heap.Tally) *Allocator {
	if t == nil {
		return nil
	}
	return (*Allocator)(t.Owner())
}

// install puts a in the table under its number. tableMu held.
func install(a *Allocator) {
	// Copy on write: readers index the published table without a lock.
	h := int(a.id)
	old := handles.Table()
	t := make([]*handles.Head, max(len(old), h+1))
	if h >= len(old) {
		t = make([]*handles.Head, max(h+1, 2*len(old)))
	}
	copy(t, old)
	t[h] = &a.head
	a.head.Fast.Gate(leakCheck.Load()) // SetLeakCheck gates the others under tableMu too
	handles.Publish(t)
	heap.SetTally(a.id, a.shards.t) // heap.Free counts a's blocks there
}

func initPredefined() {
	tableMu.Lock()
	defer tableMu.Unlock()
	handles.Publish(make([]*handles.Head, firstRuntimeHandle+64))
	for _, h := range predef.Handles() {
		ms, _ := predef.Memspace(h)
		set, _ := traits.FromList(nil) // no traits: the defaults, never an error
		switch handle(h) {
		case predef.CgroupMem:
			set.Access = traits.Cgroup
		case predef.PteamMem:
			set.Access = traits.Pteam
		case predef.ThreadMem:
			set.Access = traits.Thread
		}
		// Predefined allocators return nil when memory runs out, except
		// that the specialised ones retry on default memory.
		if handle(h) == predef.DefaultMem || ms.IsTarget() {
			set.Fallback = traits.NullFb
		}
		a, err := build(handle(h), ms, set)
		if err != nil {
			panic(fmt.Sprintf("ompalloc: predefined allocator %d: %v", h, err)) // a bug, not input
		}
		a.name = predef.Name(h)
		install(a)
	}
	def := owner(uint32(predef.DefaultMem))
	allocators(func(a *Allocator) {
		if a != def && a.traits.Fallback == traits.DefaultMemFb {
			a.fb = def
		}
	})
}

// build makes an allocator with validated traits; it is not yet in the table.
func build(h handle, ms memspace.ID, set traits.Set) (*Allocator, error) {
	a := &Allocator{head: handles.Head{Handle: uintptr(h)}, id: uint32(h & maxHandle), ms: ms, traits: set, align: max(set.Alignment, 16)}
	a.shards.init()
	a.shards.t.SetOwner(unsafe.Pointer(a)) // heap.Free names the block's allocator through its tally
	switch {
	case !slices.Contains(memspace.All(), ms): // made at run time (NewFromTraits checked it exists)
		if err := a.buildOnDevices(ms, set); err != nil {
			return nil, err
		}
	case ms.IsTarget():
		tb, err := newTargetBackend(ms, set)
		if err != nil {
			return nil, err
		}
		a.target = tb
	case set.Pinned:
		dev, err := pinDevice(set)
		if err != nil {
			return nil, err
		}
		a.heap = pinnedHeapOn(dev, ms)
	default:
		a.heap, a.pool = hostHeapFor(ms, set)
	}
	a.name = fmt.Sprintf("allocator#%d(%v%s)", h, ms, pinnedSuffix(set.Pinned))
	if set.Partition == traits.PartitionerValue {
		if err := a.usePartitioner(ms, set); err != nil {
			return nil, err
		}
	}
	if pp := pinnedPoolOf(a.heap); pp != nil && pp.multi() {
		a.pool = pp // try picks the caller's node's heap; off the fast path
	}
	a.plain = a.heap != nil && a.target == nil && set.PoolSize == 0 && a.ptn == nil && a.pool == nil
	if a.plain {
		a.head.Fast.Init(a.heap, a.shards.t, a.id, a.align)
	}
	// What a free of one of a's blocks must do besides the heap's part
	// (heap.FreeFast hands the tally back only when a flag is set).
	if a.ptn != nil {
		a.shards.t.SetFollow(heap.FollowPartition)
	}
	if set.PoolSize > 0 {
		a.shards.t.SetFollow(heap.FollowPool)
	}
	return a, nil
}

func pinnedSuffix(p bool) string {
	if p {
		return ", pinned"
	}
	return ""
}

// buildOnDevices backs an OpenMP 6.0 device memory space: target kinds
// come from the first accelerator's plugin (the first device if only the
// host is listed); host kinds are host memory pinned for the first
// accelerator, so every listed device can reach it (plain host memory when
// only the host is listed, unless the pinned trait asks otherwise).
func (a *Allocator) buildOnDevices(ms memspace.ID, set traits.Set) error {
	d, ok := memspace.DevicesOf(ms)
	if !ok {
		return fmt.Errorf("new allocator: %w: memory space %v names no devices", ErrInvalidArgument, ms)
	}
	accel := -1
	for _, dev := range d.Devices {
		if dev != target.InitialDevice() {
			accel = dev
			break
		}
	}
	if d.Base.IsTarget() {
		tb, err := newTargetBackend(d.Base, set)
		if err != nil {
			return err
		}
		tb.dev = d.Devices[0]
		if accel >= 0 {
			tb.dev = accel
		}
		a.target = tb
		return nil
	}
	if set.Pinned || accel >= 0 {
		dev := accel
		if set.PinDevice >= 0 || dev < 0 {
			var err error
			if dev, err = pinDevice(set); err != nil {
				return err
			}
		}
		a.heap = pinnedHeapOn(dev, ms) // a sub-memory space's nodes bind it
		return nil
	}
	if d.Nodes != nil {
		a.heap, a.pool = hostHeapFor(ms, set)
		return nil
	}
	a.heap = hostHeap()
	return nil
}

var (
	hostOnce sync.Once
	hostH    *heap.Heap
)

// hostHeap is the heap every unpinned host allocator shares: blocks of any
// allocator can sit side by side; the header's owner tells them apart.
func hostHeap() *heap.Heap {
	hostOnce.Do(func() {
		hostH = heap.New(heap.MapSource{}, heap.Config{Name: "host", KeepChunks: 1, KeepHuge: 64 << 20})
	})
	return hostH
}

// New makes an allocator on memory space ms with the given options. Unlike
// NewFromTraits, a pinned allocator's fallback is null_fb unless an option
// names one (see WithPinned): what was asked pinned is pinned, or an error.
func New(ms memspace.ID, opts ...Option) (*Allocator, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	ts := c.traits
	if c.pinnedWithoutFallback() {
		ts = append(ts, traits.Trait{Key: traits.Fallback, Value: traits.NullFb})
	}
	if c.fbAlloc != nil {
		ts = append(ts, traits.Trait{Key: traits.FbData, Value: uintptr(c.fbAlloc.handle())})
	}
	return NewFromTraits(ms, ts)
}

// NewFromTraits makes an allocator from an omp_alloctrait_t list, as
// omp_init_allocator does. Errors name the bad trait.
func NewFromTraits(ms memspace.ID, ts []traits.Trait) (*Allocator, error) {
	initOnce.Do(initPredefined)
	if ms == memspace.Null || !ms.Exists() {
		return nil, fmt.Errorf("new allocator: %w: no memory space %v", ErrInvalidArgument, ms)
	}
	set, err := traits.FromList(targetFallback(ms, ts))
	if err != nil {
		return nil, err
	}
	var fb *Allocator
	switch set.Fallback {
	case traits.DefaultMemFb:
		fb, _ = lookup(predef.DefaultMem)
	case traits.AllocatorFb:
		var ok bool
		if fb, ok = lookup(handle(set.FbData)); !ok || set.FbData == 0 {
			return nil, &traits.TraitError{Key: traits.FbData, Value: set.FbData, HasValue: true, Reason: "not a live allocator"}
		}
	}
	tableMu.Lock()
	defer tableMu.Unlock()
	id, reused := nextID, false
	if n := len(freeIDs); n > 0 && (n > reuseDelay || nextID > maxHandle) {
		id, freeIDs, reused = freeIDs[0], freeIDs[1:], true
	} else if id > maxHandle {
		return nil, fmt.Errorf("new allocator: %w: too many allocators (%d exist); destroy some first", ErrNotSupported, maxHandle-firstRuntimeHandle+1)
	} else {
		nextID++
	}
	var gen uint32
	if int(id) < len(gens) {
		gen = gens[id]
	}
	h := handle(gen)<<genShift | id
	// No check for cycles is needed: a fallback is bound, at creation, to
	// an allocator that already exists, so chains only point backwards in
	// time; a destroyed link ends the chain, and a reused handle is a new
	// allocator that no old chain points at.
	a, err := build(h, ms, set)
	if err != nil {
		if reused { // never handed out: first in line again
			freeIDs = append([]handle{id}, freeIDs...)
		} else {
			nextID--
		}
		return nil, err
	}
	a.fb = fb
	install(a)
	return a, nil
}

// Destroy releases the allocator (omp_destroy_allocator). Predefined
// allocators cannot be destroyed. Allocations racing with Destroy (a
// misuse) either finish before it looks at the live blocks, which it
// waits for, or fail with ErrDestroyed; the handle is reused only once no
// operation on the allocator can still run. It waits out a grace period
// for allocations in flight (a stop-the-world, tens of microseconds: the
// hot path stores no in-flight mark). Blocks still allocated stay valid until
// freed; the error (ErrLiveBlocks) says how many there were, and the same
// report goes through the warning hook (package logging, kind live_blocks;
// by default a line on stderr), so that it is not lost under
// defer a.Destroy().
func (a *Allocator) Destroy() error {
	if a.handle() < firstRuntimeHandle {
		return fmt.Errorf("%v: %w: a predefined allocator cannot be destroyed", a, ErrInvalidArgument)
	}
	if !a.head.Destroyed.CompareAndSwap(false, true) {
		return fmt.Errorf("%v: %w", a, ErrDestroyed)
	}
	// Frees of a's blocks from now on hand the tally back (heap.FreeFast),
	// so that the last one releases a.
	a.shards.t.SetFollow(heap.FollowClosed)
	// The hot path (heap.AllocEntry) serves nothing more once the grace
	// period below has passed: Close points its descriptor at a tally with
	// no shards, which its pinned section tests anyway.
	a.head.Fast.Close()
	// An allocation that started before the flag was set may still be
	// counting its block: wait for it, so that the live count read next is
	// final and the handle is never reused under it. The hot path
	// (heap.AllocEntry) reads the flag in its pinned section: a grace period
	// (pcpu.Quiesce) sees every such section ended, its count visible, and
	// every later one sees the flag. The general path counts itself in
	// flight (heap.Tally.Enter says why its sum never reads a false zero
	// once the flag is set).
	pcpu.Quiesce()
	// Before InFlight's barrier: a free that reads it unset (releasable)
	// made its count before the barrier, and the live count below sees it.
	a.quiesced.Store(true)
	for a.shards.t.InFlight() != 0 {
		runtime.Gosched()
	}
	a.leavePool() // the pool's trimming policy (poolstats.go)
	if a.ptn != nil {
		a.ptn.destroyed()
	}
	if n := a.shards.live(); n > 0 {
		err := fmt.Errorf("%v: %w: %d %s (%d bytes) still allocated", a, ErrLiveBlocks, n, plural(n, "block", "blocks"), a.Stats().BytesLive)
		warn.Emit(warn.LiveBlocks, "alloc", err.Error(), err)
		return err
	}
	a.release()
	return nil
}

// releasable reports whether a destroyed allocator can give its handle up
// now: no block live and no allocation that could still count one. (A free
// racing with Destroy may find the last block gone while an allocation that
// began before Destroy is still counting its own.)
//
// The first live count only filters: while blocks are live (each free of a
// destroyed allocator's leftovers asks) it answers without InFlight's
// process-wide barrier. The answer is the second, read after it. A free
// that comes before Destroy's grace period has passed (quiesced unset)
// answers false: a hot-path allocation that missed the flag may still be
// counting; Destroy, whose barrier follows its store of quiesced, then sees
// this free's count and releases the allocator itself.
func (a *Allocator) releasable() bool {
	if !a.head.Destroyed.Load() || a.shards.live() != 0 || !a.quiesced.Load() {
		return false
	}
	return a.shards.t.InFlight() == 0 && a.shards.live() == 0
}

// release frees the handle for reuse once a destroyed allocator has no live
// blocks.
func (a *Allocator) release() {
	tableMu.Lock()
	defer tableMu.Unlock()
	old := handles.Table()
	if int(a.id) < len(old) && old[a.id] == &a.head {
		t := append([]*handles.Head(nil), old...) // copy on write, as install
		t[a.id] = nil
		handles.Publish(t)
		for int(a.id) >= len(gens) {
			gens = append(gens, make([]uint32, len(gens)+64)...)
		}
		gens[a.id]++ // the next allocator with this number has a new handle
		freeIDs = append(freeIDs, handle(a.id))
	}
}

var defaultAlloc atomic.Pointer[Allocator]

// Default returns the process-wide default allocator: omp_default_mem_alloc
// unless OMP_ALLOCATOR or SetDefault chose another. OpenMP keeps one per
// thread; Go has no threads to hang it on, so here it is per process.
func Default() *Allocator {
	if a := defaultAlloc.Load(); a != nil {
		return a
	}
	envOnce.Do(applyEnv)
	return defaultAlloc.Load()
}

// SetDefault makes a the default allocator; nil restores omp_default_mem_alloc.
func SetDefault(a *Allocator) {
	envOnce.Do(applyEnv)
	if a == nil {
		a, _ = lookup(predef.DefaultMem)
	}
	defaultAlloc.Store(a)
}

// plural picks the word for a count ("1 block", "2 blocks").
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
