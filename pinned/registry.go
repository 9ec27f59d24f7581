package pinned

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// Registry records the host ranges locked for one device. It is safe for
// concurrent use; see the package documentation for the design.
type Registry struct {
	l Locker

	// Readers (Lookup, and the hit paths of every lock and unlock) only use
	// pt and the entries' reference words.
	pt pageTable
	n  atomic.Int64 // entries

	mu    sync.Mutex                  // serializes writers
	tree  *btree.BTreeG[*entry]       // the source of truth, ordered by host start
	pivot entry                       // search key for tree (under mu)
	st    Stats                       // counters kept under mu; Hits: those folded in
	bytes [KindRegistered + 1]uintptr // entry bytes by kind, under mu
}

// Stats is a snapshot of a registry's counters.
type Stats struct {
	Entries         int
	LockedBytes     uintptr // bytes in entries this registry locked through the Locker
	ExternalBytes   uintptr // bytes in entries found locked outside this runtime
	RegisteredBytes uintptr // bytes in entries recorded by Register
	Hits            uint64  // Lock/LockMapped requests served by an existing entry
	Misses          uint64  // Lock/LockMapped requests that needed a new entry
	Overlaps        uint64  // requests refused with ErrOverlap
	VendorLocks     uint64  // successful Locker.LockHost calls
	VendorUnlocks   uint64  // Locker.UnlockHost calls
	LockFailures    uint64  // failed Locker.LockHost or ExternalLock calls
	UnlockFailures  uint64  // failed Locker.UnlockHost calls
}

// New returns an empty registry that locks and unlocks through l.
func New(l Locker) *Registry {
	return &Registry{
		l:    l,
		tree: btree.NewG(32, func(a, b *entry) bool { return a.host < b.host }),
	}
}

// bad reports whether [p, p+n) is not a usable range.
func bad(p, n uintptr) bool { return p == 0 || n == 0 || p+n < p }

func invalid(op string, p, n uintptr) error {
	return fmt.Errorf("pinned: %s %#x (%d bytes): %w: nil pointer, zero size or wrap-around", op, p, n, ErrInvalid)
}

func nilPointer(op string) error { return fmt.Errorf("pinned: %s: %w: nil pointer", op, ErrInvalid) }

// find returns the live-or-dying entry containing p, lock-free.
func (r *Registry) find(p uintptr) *entry {
	if e := r.pt.find(p); e != nil && p >= e.host && p < e.end {
		return e
	}
	return nil
}

// Lock records a lock of [p, p+n) (llvm_omp_target_lock_mem) and returns the
// device-accessible address of p. Inside an existing entry it only adds a
// reference. Otherwise memory already locked outside this runtime is
// recorded as external, and anything else is locked through the Locker.
// A range partly overlapping entries is refused with ErrOverlap, changing
// nothing and calling nothing.
func (r *Registry) Lock(p, n uintptr) (dev uintptr, err error) {
	if bad(p, n) {
		return 0, invalid("Lock", p, n)
	}
	if e := r.find(p); e != nil && p+n <= e.end && e.acquire(explicitUnit) {
		return e.dev + (p - e.host), nil
	}
	return r.lockSlow("Lock", p, n, explicitUnit)
}

// Unlock drops one Lock reference of the entry containing p (any interior
// pointer). The last reference of any kind erases the entry and, unless the
// memory was locked externally or registered, unlocks it through the
// Locker. If that unlock fails the entry is erased all the same and the
// error returned: the registry never keeps an entry nobody references, and
// the caller has given the range up (see the package documentation).
func (r *Registry) Unlock(p uintptr) error {
	if p == 0 {
		return nilPointer("Unlock")
	}
	return r.unlock("Unlock", p, explicitUnit)
}

func (r *Registry) unlock(op string, p uintptr, unit uint64) error {
	if e := r.find(p); e != nil {
		done, held := e.release(unit)
		if done {
			return nil
		}
		if !held {
			return notHeld(op, p, e, unit)
		}
	}
	return r.unlockSlow(op, p, unit)
}

func notHeld(op string, p uintptr, e *entry, unit uint64) error {
	what := "Lock"
	if unit == mappedUnit {
		what = "LockMapped"
	}
	return fmt.Errorf("pinned: %s %#x: %w: %s holds no %s reference", op, p, ErrNotLocked, e, what)
}

// floor returns the entry with the greatest host start <= p (under mu).
func (r *Registry) floor(p uintptr) *entry {
	r.pivot.host = p
	var got *entry
	r.tree.DescendLessOrEqual(&r.pivot, func(e *entry) bool { got = e; return false })
	return got
}

// overlapErr builds the ErrOverlap error for [p, end), naming the highest
// entry it touches and how many more there are (under mu).
func (r *Registry) overlapErr(op string, p, end uintptr) error {
	var first *entry
	more := 0
	r.pivot.host = end - 1
	r.tree.DescendLessOrEqual(&r.pivot, func(e *entry) bool {
		if e.end <= p {
			return false
		}
		if first == nil {
			first = e
		} else {
			more++
		}
		return true
	})
	r.st.Overlaps++
	extra := ""
	if more > 0 {
		extra = fmt.Sprintf(" and %d more", more)
	}
	return fmt.Errorf("pinned: %s %s: %w: %s%s", op, span(p, end), ErrOverlap, first, extra)
}

// touches reports whether any entry overlaps [p, end) (under mu).
func (r *Registry) touches(p, end uintptr) bool {
	e := r.floor(end - 1)
	return e != nil && e.end > p
}

func (r *Registry) lockSlow(op string, p, n uintptr, unit uint64) (uintptr, error) {
	end := p + n
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.floor(end - 1); e != nil && e.end > p {
		if e.host > p || e.end < end {
			return 0, r.overlapErr(op, p, end)
		}
		// Contained after all: the fast path lost a race with an insert, or
		// a count is saturated. Entries in the tree are alive under mu.
		if err := r.acquireLocked(e, unit); err != nil {
			return 0, fmt.Errorf("pinned: %s %s: %w", op, span(p, end), err)
		}
		return e.dev + (p - e.host), nil
	}

	r.st.Misses++
	ext, ok, err := r.l.ExternalLock(p, n)
	if err != nil {
		r.st.LockFailures++
		return 0, fmt.Errorf("pinned: %s %s: asking whether it is locked externally: %w", op, span(p, end), err)
	}
	if ok {
		xend := ext.Host + ext.Size
		if ext.Host == 0 || ext.Size == 0 || xend < ext.Host {
			r.st.LockFailures++
			return 0, fmt.Errorf("pinned: %s %s: %w: the device reports external lock %#x+%d", op, span(p, end), ErrInvalid, ext.Host, ext.Size)
		}
		if p < ext.Host || end > xend {
			r.st.Overlaps++
			return 0, fmt.Errorf("pinned: %s %s: %w: externally locked %s", op, span(p, end), ErrOverlap, span(ext.Host, xend))
		}
		e := newEntry(ext.Host, xend, ext.Dev, KindExternal, unit)
		if r.touches(ext.Host, xend) {
			// Part of the external range is already an entry (registered
			// memory inside it, say): record just the request.
			e = newEntry(p, end, ext.Dev+(p-ext.Host), KindExternal, unit)
		}
		r.insert(e)
		return e.dev + (p - e.host), nil
	}

	dev, err := r.l.LockHost(p, n)
	if err != nil {
		r.st.LockFailures++
		return 0, fmt.Errorf("pinned: %s %s: %w", op, span(p, end), err)
	}
	r.st.VendorLocks++
	r.insert(newEntry(p, end, dev, KindLocked, unit))
	return dev, nil
}

// acquireLocked takes a reference under mu, folding the entry's hits into
// the registry's count so that its hit field starts again from 0.
func (r *Registry) acquireLocked(e *entry, unit uint64) error {
	for {
		w := e.refs.Load()
		if count(w, unit) == countMax {
			return fmt.Errorf("%w: %s has %d references", ErrBusy, e, countMax)
		}
		if e.refs.CompareAndSwap(w, w&^hitMask+unit) {
			r.st.Hits += w>>hitShift + 1
			return nil
		}
	}
}

func (r *Registry) unlockSlow(op string, p uintptr, unit uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.floor(p)
	if e == nil || p >= e.end {
		return fmt.Errorf("pinned: %s %#x: %w: no entry contains it", op, p, ErrNotLocked)
	}
	for {
		w := e.refs.Load()
		if count(w, unit) == 0 {
			return notHeld(op, p, e, unit)
		}
		if w&liveMask != unit {
			if e.refs.CompareAndSwap(w, w-unit) {
				return nil
			}
			continue
		}
		if e.refs.CompareAndSwap(w, w&^liveMask) {
			return r.retire(e)
		}
	}
}

// retire erases a dead entry (no live bits), keeps its hits, and unlocks
// what we locked. The unlock happens under mu, so no Lock of the same pages
// can reach the Locker before it.
func (r *Registry) retire(e *entry) error {
	r.st.Hits += e.refs.Load() >> hitShift
	r.erase(e)
	if e.kind() != KindLocked {
		return nil
	}
	r.st.VendorUnlocks++
	if err := r.l.UnlockHost(e.host); err != nil {
		r.st.UnlockFailures++
		return fmt.Errorf("pinned: unlock %s: entry erased, but the device failed to unlock it: %w", span(e.host, e.end), err)
	}
	return nil
}

// Register records [host, host+n), memory the device allocated as pinned
// host memory, with device address dev. It is never unlocked by the
// registry; Unregister erases it. Locks inside it add references.
func (r *Registry) Register(host, dev, n uintptr) error {
	if bad(host, n) {
		return invalid("Register", host, n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.touches(host, host+n) {
		return r.overlapErr("Register", host, host+n)
	}
	r.insert(newEntry(host, host+n, dev, KindRegistered, registered))
	return nil
}

// Unregister erases the entry Register recorded at host (its start). It
// refuses with ErrBusy, changing nothing, while Lock or LockMapped
// references to it remain.
func (r *Registry) Unregister(host uintptr) error {
	if host == 0 {
		return nilPointer("Unregister")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.floor(host)
	switch {
	case e == nil || host >= e.end:
		return fmt.Errorf("pinned: Unregister %#x: %w: no entry contains it", host, ErrNotLocked)
	case e.kind() != KindRegistered:
		return fmt.Errorf("pinned: Unregister %#x: %w: %s was not registered", host, ErrInvalid, e)
	case e.host != host:
		return fmt.Errorf("pinned: Unregister %#x: %w: interior pointer of %s", host, ErrInvalid, e)
	}
	for {
		w := e.refs.Load()
		if w&liveMask != registered {
			return fmt.Errorf("pinned: Unregister %#x: %w: %s has %d Lock and %d LockMapped references",
				host, ErrBusy, e, explicitRefs(w), mappedRefs(w))
		}
		if e.refs.CompareAndSwap(w, w&^liveMask) {
			return r.retire(e)
		}
	}
}

// insert adds a new entry, whose overlaps were ruled out, to the tree and
// then to the page table (under mu).
func (r *Registry) insert(e *entry) {
	r.tree.ReplaceOrInsert(e)
	r.index(e, e)
	r.n.Add(1)
	r.bytes[e.kind()] += e.size()
}

// erase removes a dead entry from the page table and the tree (under mu).
func (r *Registry) erase(e *entry) {
	r.tree.Delete(e)
	r.index(e, nil)
	r.n.Add(-1)
	r.bytes[e.kind()] -= e.size()
}

// index points the pages e fully covers at v (e or nil) and recomputes its
// boundary pages from the tree, which must already reflect the change.
func (r *Registry) index(e, v *entry) {
	const page = 1 << pageShift
	first := uint64(e.host) >> pageShift
	last := uint64(e.end-1) >> pageShift
	lo, hi := first, last
	headShared := e.host%page != 0
	tailShared := e.end%page != 0
	if headShared {
		lo++
	}
	if tailShared {
		if hi == 0 {
			lo = 1 // nothing fully covered
		} else {
			hi--
		}
	}
	if lo <= hi {
		r.pt.set(lo, hi, v)
	}
	if headShared {
		r.pt.setPage(first, r.pageEntries(first))
	}
	if tailShared && (last != first || !headShared) {
		r.pt.setPage(last, r.pageEntries(last))
	}
}

// pageEntries lists the entries touching page pg, from the tree (under mu).
func (r *Registry) pageEntries(pg uint64) []*entry {
	start := uintptr(pg << pageShift)
	var list []*entry
	r.pivot.host = start + (1<<pageShift - 1)
	r.tree.DescendLessOrEqual(&r.pivot, func(e *entry) bool {
		if e.end <= start {
			return false
		}
		list = append(list, e)
		return true
	})
	return list
}

// Lookup returns the device-accessible address for host address p, if p is
// inside an entry. It takes no lock and writes nothing.
func (r *Registry) Lookup(p uintptr) (dev uintptr, ok bool) {
	if e := r.find(p); e != nil && e.refs.Load()&liveMask != 0 {
		return e.dev + (p - e.host), true
	}
	return 0, false
}

// IsPinned reports whether p is inside an entry.
func (r *Registry) IsPinned(p uintptr) bool {
	e := r.find(p)
	return e != nil && e.refs.Load()&liveMask != 0
}

// Entry returns the state of the entry containing p.
func (r *Registry) Entry(p uintptr) (EntryInfo, bool) {
	e := r.find(p)
	if e == nil {
		return EntryInfo{}, false
	}
	w := e.refs.Load()
	if w&liveMask == 0 {
		return EntryInfo{}, false // erased while we looked
	}
	return e.info(w), true
}

// Len returns the number of entries.
func (r *Registry) Len() int { return int(r.n.Load()) }

// Stats returns the registry's counters. It visits every entry (the hits
// of live entries are kept in the entries), so it is not for hot paths.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.st
	s.LockedBytes = r.bytes[KindLocked]
	s.ExternalBytes = r.bytes[KindExternal]
	s.RegisteredBytes = r.bytes[KindRegistered]
	s.Entries = r.Len()
	r.tree.Ascend(func(e *entry) bool {
		s.Hits += e.refs.Load() >> hitShift
		return true
	})
	return s
}

// Dump writes one line per entry, in address order.
func (r *Registry) Dump(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tree.Ascend(func(e *entry) bool {
		in := e.info(e.refs.Load())
		fmt.Fprintf(w, "%s size=%d dev=%#x kind=%s refs=%d mapped=%d\n",
			span(e.host, e.end), in.Size, in.Dev, in.Kind, in.Refs, in.MappedRefs)
		return true
	})
}
