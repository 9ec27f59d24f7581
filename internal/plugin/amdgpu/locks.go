package amdgpu

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/inflight"
	"github.com/ompalloc/ompalloc/pinned"
)

// lockTable is every host range the plugin locked with hsa_amd_memory_lock,
// for all its devices, with the agent pointer the runtime returned at lock
// time. It is the plugin's own memory of its locks, as LLVM's pinned map is
// its: where libhsakmt locks through the KFD SVM API, hsa_amd_pointer_info
// answers HSA_EXT_POINTER_TYPE_UNKNOWN for locked memory, so asking the
// runtime again would treat pinned memory as pageable (lock again for every
// copy) and never see a lock another device made.
//
// Ranges are locked for every GPU agent (as LLVM does, with no agent list),
// so one lock serves all devices: a LockHost inside a range another device
// locked, and a copy from it, only add a reference. The last reference
// unlocks. Entries never overlap.
//
// The table's mutex covers the books, never hsa_amd_memory_lock or
// hsa_amd_memory_unlock (which waits for the GPU's work on the range): a
// range being locked or unlocked is in flight, and a lock, a copy or a
// query overlapping it waits for it to land and looks again, while those of
// other ranges go on.
type lockTable struct {
	mu      sync.Mutex
	ents    []*lockEnt     // sorted by host
	flights inflight.Table // ranges being locked or unlocked without mu
}

// lockWaiting takes t.mu once no flight shares a page with [p, p+n): the
// runtime locks whole pages, so the unlock of one range and the lock of
// another in the same page stay in order.
func (t *lockTable) lockWaiting(p, n uintptr) {
	t.mu.Lock()
	t.flights.Settle(&t.mu, p, p+n)
}

type lockEnt struct {
	host, size, agent uintptr
	refs              int
}

func (e *lockEnt) end() uintptr { return e.host + e.size }

// findLocked returns the index of the first entry that ends after p.
func (t *lockTable) findLocked(p uintptr) int {
	return sort.Search(len(t.ents), func(i int) bool { return t.ents[i].end() > p })
}

// containing returns the entry holding address p, or nil.
func (t *lockTable) containingLocked(p uintptr) *lockEnt {
	i := t.findLocked(p)
	if i < len(t.ents) && t.ents[i].host <= p {
		return t.ents[i]
	}
	return nil
}

// contains reports whether p lies in a range the plugin locked.
// A range in flight is waited for: until it lands, the runtime's answer
// about it is about a lock of ours not yet recorded, or on its way out.
func (t *lockTable) contains(p uintptr) bool {
	t.lockWaiting(p, 1)
	defer t.mu.Unlock()
	return t.containingLocked(p) != nil
}

// acquire returns the agent pointer of host range [p, p+n) and the start of
// the entry that now holds a reference for the caller. A range inside an
// entry adds a reference; a range overlapping none is locked for agents,
// outside the mutex.
func (t *lockTable) acquire(fn *syms, agents []uint64, p, n uintptr) (agent, base uintptr, err error) {
	t.lockWaiting(p, n)
	i := t.findLocked(p)
	if i < len(t.ents) && t.ents[i].host <= p {
		defer t.mu.Unlock()
		e := t.ents[i]
		if n > e.end()-p {
			return 0, 0, fmt.Errorf("%w: [%#x, +%d) runs past the end of the locked range [%#x, +%d)", ErrOverlap, p, n, e.host, e.size)
		}
		e.refs++
		return e.agent + (p - e.host), e.host, nil
	}
	if i < len(t.ents) && t.ents[i].host < p+n {
		defer t.mu.Unlock()
		e := t.ents[i]
		return 0, 0, fmt.Errorf("%w: [%#x, +%d) overlaps the locked range [%#x, +%d)", ErrOverlap, p, n, e.host, e.size)
	}
	f := t.flights.Start(p, p+n)
	t.mu.Unlock()
	dev, err := fn.lockFor(agents, p, n)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flights.Land(f)
	if err != nil {
		return 0, 0, err
	}
	t.insertLocked(&lockEnt{host: p, size: n, agent: dev, refs: 1})
	return dev, p, nil
}

// insertLocked adds e, which overlaps no entry. t.mu held.
func (t *lockTable) insertLocked(e *lockEnt) {
	i := t.findLocked(e.host)
	t.ents = append(t.ents, nil)
	copy(t.ents[i+1:], t.ents[i:])
	t.ents[i] = e
}

// release drops a reference acquire gave on the entry starting at base; the
// last one unlocks, outside the mutex. A failed unlock keeps the entry and
// its reference and says pinned.ErrStillLocked, so the caller (the
// registry, the pinned heap) keeps its own record and may retry. That is
// what ROCr makes true: MemoryRegion::Unlock ignores what unmapping and
// deregistering find and returns HSA_STATUS_SUCCESS, so a failure comes
// from before it changed anything (HSA_STATUS_ERROR_NOT_INITIALIZED, an
// exception turned into a status), and an unlock of memory no longer locked
// succeeds: a retry is always safe. Its success also says nothing about a
// lock made outside the plugin: nothing here relies on unlock failing for
// memory not locked.
func (t *lockTable) release(fn *syms, base uintptr) error {
	t.lockWaiting(base, 1)
	e := t.containingLocked(base)
	if e == nil || e.host != base {
		t.mu.Unlock()
		return fmt.Errorf("%w: no lock at %#x", ErrNotLocked, base)
	}
	if e.refs > 1 {
		e.refs--
		t.mu.Unlock()
		return nil
	}
	f := t.flights.Start(e.host, e.host+e.size)
	t.mu.Unlock()
	err := fn.status("hsa_amd_memory_unlock", fn.memUnlock, base)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flights.Land(f)
	if err != nil {
		return fmt.Errorf("%w: %w", err, pinned.ErrStillLocked)
	}
	i := t.findLocked(base)
	t.ents = append(t.ents[:i], t.ents[i+1:]...)
	return nil
}

// piece is part of a copy's host range and the address the GPU uses for it.
type piece struct {
	off, n, addr uintptr
}

// pieces splits host range [p, p+n) at the plugin's locked ranges: inside
// one, the agent pointer from lock time (the copy takes a reference, in
// refs, so that the lock outlives it); elsewhere, what gap answers for the
// part [q, end) up to the next locked range. A gap that must be locked for
// the transfer is locked outside the mutex, in flight meanwhile.
func (t *lockTable) pieces(fn *syms, agents []uint64, p, n uintptr, gap func(q, end uintptr) (piece, bool, error)) (ps []piece, refs []uintptr, err error) {
	end := p + n
	for q := p; q < end; {
		t.lockWaiting(q, end-q)
		i := t.findLocked(q)
		if i < len(t.ents) && t.ents[i].host <= q {
			e := t.ents[i]
			k := min(end, e.end()) - q
			e.refs++
			t.mu.Unlock()
			refs = append(refs, e.host)
			ps = append(ps, piece{off: q - p, n: k, addr: e.agent + (q - e.host)})
			q += k
			continue
		}
		stop := end
		if i < len(t.ents) && t.ents[i].host < end {
			stop = t.ents[i].host
		}
		f := t.flights.Start(q, stop)
		t.mu.Unlock()
		pc, tracked, err := gap(q, stop)
		t.mu.Lock()
		t.flights.Land(f)
		if err != nil {
			t.mu.Unlock()
			return nil, refs, err
		}
		if tracked {
			// gap locked [q, q+pc.n) for the transfer: keep it here, so
			// that other copies share it and it is unlocked with the last.
			t.insertLocked(&lockEnt{host: q, size: pc.n, agent: pc.addr, refs: 1})
			refs = append(refs, q)
		}
		t.mu.Unlock()
		pc.off = q - p
		ps = append(ps, pc)
		q += pc.n
	}
	return ps, refs, nil
}

// releaseAll drops the references of refs, reporting every failure.
func (t *lockTable) releaseAll(fn *syms, refs []uintptr) error {
	var errs []error
	for _, b := range refs {
		errs = append(errs, t.release(fn, b))
	}
	return errors.Join(errs...)
}

// lockFor locks [p, p+n) for agents, outside the table (a transfer's own
// lock, inserted by pieces under the table's lock).
func (fn *syms) lockFor(agents []uint64, p, n uintptr) (uintptr, error) {
	var dev uintptr
	err := fn.status("hsa_amd_memory_lock", fn.memLock, p, n, uintptr(unsafe.Pointer(&agents[0])), uintptr(len(agents)), uintptr(unsafe.Pointer(&dev)))
	return dev, err
}
