package pinreg

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/ompalloc/ompalloc/internal/inflight"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Registry records the host ranges locked for one device. It is safe for
// concurrent use; see the package documentation for the design.
type Registry struct {
	l Locker

	// Readers (Lookup, and the hit paths of every lock and unlock) only use
	// pt and the entries' reference words.
	pt pageTable
	n  atomic.Int64 // entries

	mu     sync.Mutex                  // serializes writers
	tree   *btree.BTreeG[*entry]       // the source of truth, ordered by host start
	owners map[uintptr]string          // Hold's owner names by entry start (under mu)
	pivot  entry                       // search key for tree (under mu)
	st     Stats                       // counters kept under mu; Hits: those folded in
	bytes  [KindRegistered + 1]uintptr // entry bytes by kind, under mu

	flights inflight.Table // ranges whose Locker call runs without mu (flight.go)
}

// New returns an empty registry that locks and unlocks through l.
func New(l Locker) *Registry {
	return &Registry{
		l:      l,
		tree:   btree.NewG(32, func(a, b *entry) bool { return a.host < b.host }),
		owners: map[uintptr]string{},
	}
}

// bad reports whether [p, p+n) is not a usable range.
func bad(p, n uintptr) bool { return p == 0 || n == 0 || p+n < p }

func invalid(op string, p, n uintptr) error {
	return fmt.Errorf("pinned: %s %#x (%d bytes): %w: nil pointer, zero size or wrap-around", op, p, n, sentinel.ErrInvalidArgument)
}

func nilPointer(op string) error {
	return fmt.Errorf("pinned: %s: %w: nil pointer", op, sentinel.ErrInvalidArgument)
}

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
// memory was locked externally, registered or held, unlocks it through the
// Locker. If that unlock fails with an error wrapping ErrStillLocked, the
// entry and its reference stay as they were; any other failure erases the
// entry all the same and returns the error (see the package documentation).
// An entry holding no Lock reference (one that Hold or Register made, or
// LockMapped alone references) is ErrNotLocked naming it, and nothing
// changes: a user's unlock never drops a reference it did not take.
func (r *Registry) Unlock(p uintptr) error {
	if p == 0 {
		return nilPointer("Unlock")
	}
	return r.unlock("Unlock", p, explicitUnit)
}

func (r *Registry) unlock(op string, p uintptr, unit uint64) error {
	if e := r.find(p); e != nil {
		if done, _ := e.release(unit); done {
			return nil
		}
	}
	// Not done: the last reference, or none of this kind (the slow path
	// names the entry and its owner under mu).
	return r.unlockSlow(op, p, unit)
}

// notHeld is the error for dropping a reference of unit's kind that e does
// not hold (under mu, for the owner's name).
func (r *Registry) notHeld(op string, p uintptr, e *entry, unit uint64) error {
	what := "Lock"
	if unit == mappedUnit {
		what = "LockMapped"
	}
	by := ""
	if o, ok := r.owners[e.host]; ok {
		by = "; it is held by " + o
	}
	w := e.refs.Load()
	return fmt.Errorf("pinned: %s %#x: %w: %s holds no %s reference (%d Lock, %d LockMapped)%s",
		op, p, ErrNotLocked, e, what, explicitRefs(w), mappedRefs(w), by)
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
	r.settle(p, end)
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
	var ext External
	var ok bool
	var err error
	var dev uintptr
	var lockErr error
	r.unlocked(p, end, func() {
		if ext, ok, err = r.l.ExternalLock(p, n); err == nil && !ok {
			dev, lockErr = r.l.LockHost(p, n)
		}
	})
	if err != nil {
		r.st.LockFailures++
		return 0, fmt.Errorf("pinned: %s %s: asking whether it is locked externally: %w", op, span(p, end), err)
	}
	if ok {
		xend := ext.Host + ext.Size
		if ext.Host == 0 || ext.Size == 0 || xend < ext.Host {
			r.st.LockFailures++
			return 0, fmt.Errorf("pinned: %s %s: %w: the device reports external lock %#x+%d", op, span(p, end), sentinel.ErrInvalidArgument, ext.Host, ext.Size)
		}
		if p < ext.Host || end > xend {
			r.st.Overlaps++
			return 0, fmt.Errorf("pinned: %s %s: %w: externally locked %s", op, span(p, end), ErrOverlap, span(ext.Host, xend))
		}
		e := newEntry(ext.Host, xend, ext.Dev, KindExternal, unit)
		if r.touches(ext.Host, xend) || r.flights.Overlap(ext.Host, xend) != nil {
			// Part of the external range is already an entry (registered
			// memory inside it, say): record just the request.
			e = newEntry(p, end, ext.Dev+(p-ext.Host), KindExternal, unit)
		}
		r.insert(e)
		return e.dev + (p - e.host), nil
	}

	if lockErr != nil {
		r.st.LockFailures++
		return 0, fmt.Errorf("pinned: %s %s: %w", op, span(p, end), lockErr)
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
	r.settle(p, p+1)
	e := r.floor(p)
	if e == nil || p >= e.end {
		return fmt.Errorf("pinned: %s %#x: %w: no entry contains it", op, p, ErrNotLocked)
	}
	for {
		w := e.refs.Load()
		if count(w, unit) == 0 {
			return r.notHeld(op, p, e, unit)
		}
		if w&liveMask != unit {
			if e.refs.CompareAndSwap(w, w-unit) {
				return nil
			}
			continue
		}
		if e.refs.CompareAndSwap(w, w&^liveMask) {
			return r.retire(e, w)
		}
	}
}

// retire unlocks what we locked of an entry whose live bits were just
// cleared (w is its word before) and erases it, keeping its hits. The unlock
// runs without mu but with the entry's range in flight, so no writer of the
// same range reaches the entry or the Locker before it is done. When the
// Locker says the range is still locked (ErrStillLocked), the entry comes
// back to life with the word it had: no lock-free path changes a dead word,
// and every writer of the range waits for the flight, so nobody saw it gone
// but lock-free readers, which fall back to mu.
func (r *Registry) retire(e *entry, w uint64) error {
	if e.kind() == KindLocked {
		r.st.VendorUnlocks++
		var err error
		r.unlocked(e.host, e.end, func() { err = r.l.UnlockHost(e.host) })
		if err != nil {
			r.st.UnlockFailures++
			if errors.Is(err, ErrStillLocked) {
				e.refs.Store(w)
				return fmt.Errorf("pinned: unlock %s: entry and references kept: %w", span(e.host, e.end), err)
			}
			r.forget(e)
			return fmt.Errorf("pinned: unlock %s: entry erased, but the device failed to unlock it: %w", span(e.host, e.end), err)
		}
	}
	r.forget(e)
	return nil
}

// forget erases a dead entry and keeps its hits (under mu).
func (r *Registry) forget(e *entry) {
	r.st.Hits += e.refs.Load() >> hitShift
	r.erase(e)
	delete(r.owners, e.host)
}

// Hold locks [p, p+n), memory an owner inside this runtime mapped for
// itself (a pinned heap's chunk), through the Locker, and records it with a
// reference that only Release drops: Unlock and UnlockUnmapped never reach
// it, and errors about the entry name owner. Locks inside it add references
// as usual. A range touching any entry is refused with ErrOverlap.
func (r *Registry) Hold(p, n uintptr, owner string) (dev uintptr, err error) {
	if bad(p, n) {
		return 0, invalid("Hold", p, n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(p, p+n)
	if r.touches(p, p+n) {
		return 0, r.overlapErr("Hold", p, p+n)
	}
	r.st.Misses++
	r.unlocked(p, p+n, func() { dev, err = r.l.LockHost(p, n) })
	if err != nil {
		r.st.LockFailures++
		return 0, fmt.Errorf("pinned: Hold %s for %s: %w", span(p, p+n), owner, err)
	}
	r.st.VendorLocks++
	r.insert(newEntry(p, p+n, dev, KindLocked, registered))
	r.owners[p] = owner
	return dev, nil
}

// Release drops the entry Hold recorded at p (its start), with any Lock and
// LockMapped references still inside it, and unlocks it through the Locker.
// It returns how many references of each kind it dropped, so that the
// owner can say so: they belonged to callers who locked inside memory the
// owner is giving up. If the unlock fails with ErrStillLocked nothing
// changes; on any other failure the entry is erased and the error returned.
func (r *Registry) Release(p uintptr) (locks, mapped int, err error) {
	if p == 0 {
		return 0, 0, nilPointer("Release")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(p, p+1)
	e := r.floor(p)
	switch {
	case e == nil || p >= e.end:
		return 0, 0, fmt.Errorf("pinned: Release %#x: %w: no entry contains it", p, ErrNotLocked)
	case e.host != p:
		return 0, 0, fmt.Errorf("pinned: Release %#x: %w: interior pointer of %s", p, sentinel.ErrInvalidArgument, e)
	}
	if _, held := r.owners[p]; !held || e.kind() != KindLocked {
		return 0, 0, fmt.Errorf("pinned: Release %#x: %w: %s was not made by Hold", p, sentinel.ErrInvalidArgument, e)
	}
	for {
		w := e.refs.Load()
		if e.refs.CompareAndSwap(w, w&^liveMask) {
			return explicitRefs(w), mappedRefs(w), r.retire(e, w)
		}
	}
}

// Held reports the owner of the entry Hold recorded at p (its start).
func (r *Registry) Held(p uintptr) (owner string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(p, p+1)
	owner, ok = r.owners[p]
	return owner, ok
}

// HeldStats returns the number of entries Hold made and their bytes.
func (r *Registry) HeldStats() (entries int, bytes uintptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleAll()
	return r.heldLocked()
}

// heldLocked counts the entries Hold made and their bytes; r.mu is held
// and the registry settled.
func (r *Registry) heldLocked() (entries int, bytes uintptr) {
	for p := range r.owners {
		if e := r.floor(p); e != nil && e.host == p {
			entries++
			bytes += e.size()
		}
	}
	return entries, bytes
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
	r.settle(host, host+n)
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
	r.settle(host, host+1)
	e := r.floor(host)
	switch {
	case e == nil || host >= e.end:
		return fmt.Errorf("pinned: Unregister %#x: %w: no entry contains it", host, ErrNotLocked)
	case e.kind() != KindRegistered:
		return fmt.Errorf("pinned: Unregister %#x: %w: %s was not registered", host, sentinel.ErrInvalidArgument, e)
	case e.host != host:
		return fmt.Errorf("pinned: Unregister %#x: %w: interior pointer of %s", host, sentinel.ErrInvalidArgument, e)
	}
	for {
		w := e.refs.Load()
		if w&liveMask != registered {
			return fmt.Errorf("pinned: Unregister %#x: %w: %s has %d Lock and %d LockMapped references",
				host, ErrBusy, e, explicitRefs(w), mappedRefs(w))
		}
		if e.refs.CompareAndSwap(w, w&^liveMask) {
			return r.retire(e, w)
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
	r.settleAll()
	s := r.st
	s.LockedBytes = r.bytes[KindLocked]
	s.ExternalBytes = r.bytes[KindExternal]
	s.RegisteredBytes = r.bytes[KindRegistered]
	s.Entries = r.Len()
	r.tree.Ascend(func(e *entry) bool {
		s.Hits += e.refs.Load() >> hitShift
		return true
	})
	s.HeldEntries, s.HeldBytes = r.heldLocked()
	return s
}

// Each calls f with every entry, in address order, until f returns false.
// It holds the writer mutex: f must not call the registry.
func (r *Registry) Each(f func(EntryInfo) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleAll()
	r.tree.Ascend(func(e *entry) bool { return f(e.info(e.refs.Load())) })
}

// Dump writes one line per entry, in address order.
func (r *Registry) Dump(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleAll()
	r.tree.Ascend(func(e *entry) bool {
		in := e.info(e.refs.Load())
		fmt.Fprintf(w, "%s size=%d dev=%#x kind=%s refs=%d mapped=%d\n",
			span(e.host, e.end), in.Size, in.Dev, in.Kind, in.Refs, in.MappedRefs)
		return true
	})
}
