package pinreg

import (
	"sort"
	"sync/atomic"
)

// The page table is the readers' index: a radix tree over 4 KiB page numbers
// (like UCX's registration-cache page table), so that finding the entry that
// holds an address costs the same few loads whether 10 or 10 million entries
// exist. Six levels of 9 bits cover every 64-bit address: five inner levels
// and a leaf level.
//
// A slot holds nil (no entry touches its span: a definitive miss), an entry,
// or a child node. An inner slot holds an entry only when that entry covers
// the slot's whole span (a "block": a 1 GiB locked range needs a few hundred
// slots, not 262,144). A leaf slot holds the only entry touching its page, or,
// when two or more entries share the page, the sharedPage marker, and the
// leaf's side table lists them. Only boundary pages (partly covered by an
// entry) can be shared, because entries never overlap.
//
// Readers walk it with atomic loads and no lock. Writers (under the registry
// mutex) store slots one at a time; every intermediate state is one a reader
// may see safely: the reader re-checks what it finds against the entry's own
// range and reference word.
const (
	pageShift = 12
	ptBits    = 9
	ptFan     = 1 << ptBits
	ptMask    = ptFan - 1
	topShift  = 5 * ptBits // index bits of the root level within a page number
	lastShift = 2 * ptBits // a last-level inner node spans 1<<lastShift pages (1 GiB)
	hintBits  = 6
)

type ptSlot struct {
	ent   atomic.Pointer[entry]   // a block entry covering the whole span
	child atomic.Pointer[ptInner] // levels above the last inner one
	leaf  atomic.Pointer[ptLeaf]  // the last inner level
}

type ptInner struct {
	slots [ptFan]ptSlot
	used  int    // non-empty slots; writer only
	key   uint64 // last inner level: page number >> lastShift of its span
}

type ptLeaf struct {
	slots [ptFan]atomic.Pointer[entry]
	multi atomic.Pointer[multiTab] // lists for sharedPage slots, made on first use
	used  int                      // non-nil slots; writer only
}

// multiTab holds, per page, the entries sharing it. A list is replaced, never
// cleared: a reader that saw sharedPage just before the slot changed must
// still find the entries that were there (dead ones fail their own checks).
type multiTab [ptFan]atomic.Pointer[[]*entry]

// sharedPage marks a leaf slot whose page several entries share. Its empty
// range contains no address.
var sharedPage = &entry{}

type pageTable struct {
	root ptInner
	// hint maps a 1 GiB region (by its number's low bits) to its last-level
	// inner node, so that most finds skip the four levels above it: a short,
	// straight path lets the CPU overlap the misses of consecutive calls. A
	// hint whose key does not match, or none, means the full walk.
	hint [1 << hintBits]atomic.Pointer[ptInner]
}

// find returns the entry the table holds for p's page, which may not contain
// p when it only partly covers the page, or nil.
func (t *pageTable) find(p uintptr) *entry {
	pg := uint64(p) >> pageShift
	if n := t.hint[pg>>lastShift&(1<<hintBits-1)].Load(); n != nil && n.key == pg>>lastShift {
		return n.last(pg, p)
	}
	return t.walk(pg, p)
}

func (t *pageTable) walk(pg uint64, p uintptr) *entry {
	n := &t.root
	for sh := uint(topShift); sh > ptBits; sh -= ptBits {
		s := &n.slots[pg>>sh&ptMask]
		if e := s.ent.Load(); e != nil {
			return e
		}
		if n = s.child.Load(); n == nil {
			return nil
		}
	}
	return n.last(pg, p)
}

// last finishes a find in a last-level inner node.
func (n *ptInner) last(pg uint64, p uintptr) *entry {
	s := &n.slots[pg>>ptBits&ptMask]
	if e := s.ent.Load(); e != nil {
		return e
	}
	l := s.leaf.Load()
	if l == nil {
		return nil
	}
	e := l.slots[pg&ptMask].Load()
	if e == sharedPage {
		return l.shared(pg&ptMask, p)
	}
	return e
}

// hintAt points the hint for n's region at n (a node being filled).
func (t *pageTable) hintAt(n *ptInner) {
	t.hint[n.key&(1<<hintBits-1)].Store(n)
}

// unhint forgets n (a node being unlinked) if the hint holds it.
func (t *pageTable) unhint(n *ptInner) {
	t.hint[n.key&(1<<hintBits-1)].CompareAndSwap(n, nil)
}

// shared finds p's entry among those sharing page i. A list is sorted by
// host address, highest first (pageEntries descends the tree), and its
// entries are disjoint (the tree's are), so the first one starting at or
// below p is the only one that can hold p: a binary search. A scan cost a
// hit on a page of 128 locked 32 B ranges about 800 instructions
// (bench/icount's lock-hit, a lock+unlock: 1,150-1,240 instructions
// scanning, 629 searching).
func (l *ptLeaf) shared(i uint64, p uintptr) *entry {
	tab := l.multi.Load()
	if tab == nil {
		return nil
	}
	list := tab[i].Load()
	if list == nil {
		return nil
	}
	es := *list
	if i := sort.Search(len(es), func(m int) bool { return es[m].host <= p }); i < len(es) && p < es[i].end {
		return es[i]
	}
	return nil
}

// setPage stores a boundary page's entries: none, one, or several.
func (t *pageTable) setPage(pg uint64, list []*entry) {
	switch len(list) {
	case 0:
		t.set(pg, pg, nil)
	case 1:
		t.set(pg, pg, list[0])
	default:
		l := t.leafFor(pg)
		tab := l.multi.Load()
		if tab == nil {
			tab = new(multiTab)
			l.multi.Store(tab)
		}
		i := pg & ptMask
		tab[i].Store(&list) // before the marker, so a reader seeing it finds the list
		if l.slots[i].Load() == nil {
			l.used++
		}
		l.slots[i].Store(sharedPage)
	}
}

// leafFor returns pg's leaf, creating the path to it. No block lies on that
// path: pg is partly covered by an entry, so no entry covers it whole.
func (t *pageTable) leafFor(pg uint64) *ptLeaf {
	n := &t.root
	for sh := uint(topShift); ; sh -= ptBits {
		s := &n.slots[pg>>sh&ptMask]
		if sh == ptBits {
			l := s.leaf.Load()
			if l == nil {
				if slotEmpty(s) {
					n.used++
				}
				l = new(ptLeaf)
				s.leaf.Store(l)
			}
			return l
		}
		c := s.child.Load()
		if c == nil {
			if slotEmpty(s) {
				n.used++
			}
			c = &ptInner{key: pg >> lastShift}
			s.child.Store(c)
		}
		if sh-ptBits == ptBits {
			t.hintAt(c)
		}
		n = c
	}
}

// set stores e (nil to clear) for every page in [lo, hi]. When e is not nil
// those pages must be fully covered by e, or be single pages whose value the
// caller computed. Nodes left empty by a clear are unlinked.
func (t *pageTable) set(lo, hi uint64, e *entry) {
	t.fill(&t.root, topShift, 0, lo, hi, e)
}

func slotEmpty(s *ptSlot) bool {
	return s.ent.Load() == nil && s.child.Load() == nil && s.leaf.Load() == nil
}

// fill sets pages [lo, hi], all inside node n whose span starts at page base
// and whose slots each span 1<<sh pages.
func (t *pageTable) fill(n *ptInner, sh uint, base, lo, hi uint64, e *entry) {
	if sh == ptBits && e != nil {
		t.hintAt(n)
	}
	span := uint64(1) << sh
	for i := (lo - base) >> sh; i <= (hi-base)>>sh; i++ {
		s := &n.slots[i]
		sb := base + i<<sh
		se := sb + (span - 1)
		wasEmpty := slotEmpty(s)
		switch {
		case lo <= sb && se <= hi:
			s.ent.Store(e) // the whole span: a block
		case sh == ptBits:
			l := s.leaf.Load()
			if l == nil {
				if e == nil {
					continue
				}
				l = new(ptLeaf)
				s.leaf.Store(l)
			}
			for pg := max(lo, sb); pg <= min(hi, se); pg++ {
				ls := &l.slots[pg&ptMask]
				old := ls.Load()
				ls.Store(e)
				switch {
				case old == nil && e != nil:
					l.used++
				case old != nil && e == nil:
					l.used--
				}
			}
			if l.used == 0 {
				s.leaf.Store(nil)
			}
		default:
			c := s.child.Load()
			if c == nil {
				if e == nil {
					continue
				}
				c = &ptInner{key: sb >> lastShift}
				s.child.Store(c)
			}
			t.fill(c, sh-ptBits, sb, max(lo, sb), min(hi, se), e)
			if c.used == 0 {
				if sh-ptBits == ptBits {
					t.unhint(c)
				}
				s.child.Store(nil)
			}
		}
		switch isEmpty := slotEmpty(s); {
		case wasEmpty && !isEmpty:
			n.used++
		case !wasEmpty && isEmpty:
			n.used--
		}
	}
}
