package pinreg

import (
	"fmt"
	"sync/atomic"
)

// The reference word packs everything that keeps an entry alive, so that one
// CAS decides both "take a reference" and "is it still alive"; the entry's
// kind, so that an entry fits in 32 bytes (half a cache line: the hot path at
// 100,000 entries is bound by cache misses); and the entry's recent hits, so
// that counting them costs no second atomic operation (one more locked
// instruction per lock doubled the cost at 100,000 entries). An entry whose
// live bits are 0 is dead for good: only the writer, under the registry
// mutex, clears them, and erases the entry in the same critical section; the
// lock-free hit path never adds to a dead word.
const (
	countBits    = 24
	countMax     = 1<<countBits - 1
	mappedUnit   = uint64(1)                    // bits 0..23: LockMapped references
	explicitUnit = uint64(1) << countBits       // bits 24..47: Lock references
	registered   = uint64(1) << (2 * countBits) // bit 48: Register or Hold, until Unregister or Release
	liveMask     = registered<<1 - 1
	kindShift    = 2*countBits + 1 // bits 49..50: Kind, never changes
	hitShift     = kindShift + 2   // bits 51..63: hits not yet added to Stats.Hits
	hitUnit      = uint64(1) << hitShift
	hitMax       = 1<<(64-hitShift) - 1
	hitMask      = uint64(hitMax) << hitShift
)

func mappedRefs(w uint64) int   { return int(w & countMax) }
func explicitRefs(w uint64) int { return int(w >> countBits & countMax) }

// entry is one registry entry. host, end and dev never change after
// insertion; refs holds the references and the kind.
type entry struct {
	host, end, dev uintptr
	refs           atomic.Uint64
}

func newEntry(host, end, dev uintptr, k Kind, refs uint64) *entry {
	e := &entry{host: host, end: end, dev: dev}
	e.refs.Store(uint64(k)<<kindShift | refs)
	return e
}

func (e *entry) kind() Kind { return kindOf(e.refs.Load()) }

func kindOf(w uint64) Kind { return Kind(w >> kindShift & 3) }

func (e *entry) size() uintptr { return e.end - e.host }

// count returns the references of unit's kind in w.
func count(w, unit uint64) int {
	if unit == explicitUnit {
		return explicitRefs(w)
	}
	return mappedRefs(w)
}

// acquire adds one reference of unit's kind, and one hit, unless the entry
// is dead or a count is saturated (the slow path deals with that).
func (e *entry) acquire(unit uint64) bool {
	for {
		w := e.refs.Load()
		if w&liveMask == 0 || count(w, unit) == countMax || w>>hitShift == hitMax {
			return false
		}
		if e.refs.CompareAndSwap(w, w+unit+hitUnit) {
			return true
		}
	}
}

// release drops one reference of unit's kind unless it is the entry's last
// reference of any kind (that one needs the writer). It returns done=false
// when the caller must take the slow path, and held=false when the entry holds
// no reference of that kind at all.
func (e *entry) release(unit uint64) (done, held bool) {
	for {
		w := e.refs.Load()
		live := w & liveMask
		if live == 0 {
			return false, true // dead: let the slow path look again
		}
		if count(w, unit) == 0 {
			return false, false
		}
		if live == unit {
			return false, true
		}
		if e.refs.CompareAndSwap(w, w-unit) {
			return true, true
		}
	}
}

func (e *entry) info(w uint64) EntryInfo {
	return EntryInfo{
		Host: e.host, Dev: e.dev, Size: e.size(),
		Refs: explicitRefs(w), MappedRefs: mappedRefs(w),
		External: kindOf(w) == KindExternal, Kind: kindOf(w),
	}
}

func (e *entry) String() string {
	return fmt.Sprintf("%s [%#x, %#x)", e.kind(), e.host, e.end)
}
