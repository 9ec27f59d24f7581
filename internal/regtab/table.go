package regtab

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/inflight"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// ErrNotLocked is Unlock's error when the holder holds no lock at the
// address, unless Config.NotLocked names the plugin's own.
var ErrNotLocked = errors.New("not locked by this device")

// ErrOverlap is an Exact table's error for a range that overlaps a
// registration without lying inside it, unless Config.Overlap names the
// plugin's own.
var ErrOverlap = errors.New("overlaps a locked range")

// Span is a host range [Host, Host+Size).
type Span struct{ Host, Size uintptr }

// End is the first address after the span.
func (s Span) End() uintptr { return s.Host + s.Size }

func (s Span) contains(p, n uintptr) bool {
	return p >= s.Host && n <= s.Size && p-s.Host <= s.Size-n
}

// Reg is a registration as the plugin sees it: its range and the value the
// plugin's Register returned for it.
type Reg[T any] struct {
	Span
	Val T
}

// Config is what a plugin tells its table once.
type Config[T any] struct {
	// Exact: registrations are of the ranges locked, and a range overlapping
	// one without lying inside it is refused. Otherwise (Pages) locks cover
	// whole pages and share every registration on their pages.
	Exact bool
	// MaxPiece is the most bytes one registration of a Pages table covers
	// (0: no limit): a longer run of pages is registered in several. An
	// Exact table registers each range as it is.
	MaxPiece uintptr
	// Unregister is the driver's unregister of r, called without the
	// table's mutex. An error wrapping sentinel.ErrStillLocked says the
	// registration is intact and a retry safe.
	Unregister func(r Reg[T]) error
	// NotLocked and Overlap are the plugin's sentinels for ErrNotLocked
	// and ErrOverlap (nil: those).
	NotLocked, Overlap error
}

// reg is a registration in the table.
type reg[T any] struct {
	Reg[T]
	refs int  // holds and loans on it; 0 after a failed unregister
	gone bool // unregistered and out of the table
}

type key[H comparable] struct {
	h H
	p uintptr
}

// Table is one driver's registrations for the whole process, held by
// holders of type H (its devices). It is safe for concurrent use.
type Table[H comparable, T any] struct {
	cfg  Config[T]
	page uintptr

	mu      sync.Mutex
	regs    []*reg[T]              // by address; never overlapping
	holds   map[key[H]][][]*reg[T] // a holder's locks at an address, newest last
	flights inflight.Table         // ranges being registered or unregistered without mu
	spans   atomic.Pointer[[]Span] // regs' spans, for Cut without mu
}

// New returns an empty table.
func New[H comparable, T any](cfg Config[T]) *Table[H, T] {
	if cfg.NotLocked == nil {
		cfg.NotLocked = ErrNotLocked
	}
	if cfg.Overlap == nil {
		cfg.Overlap = ErrOverlap
	}
	return &Table[H, T]{cfg: cfg, page: uintptr(os.Getpagesize()), holds: map[key[H]][][]*reg[T]{}}
}

// bounds is the range a lock of [p, p+n) covers: its pages, or itself.
func (t *Table[H, T]) bounds(p, n uintptr) (lo, hi uintptr) {
	if t.cfg.Exact {
		return p, p + n
	}
	return p &^ (t.page - 1), (p + n + t.page - 1) &^ (t.page - 1)
}

// Lock takes a lock of h on [p, p+n) and returns the device address of p.
// The registrations covering its range are referenced; what none covers is
// registered by register (one call per registration, without the mutex,
// the range in flight). resolve, also without the mutex, gets the
// registrations the lock holds, in address order, and those just made, and
// returns the device address of p or refuses the lock. On any failure the
// table is left as it was.
func (t *Table[H, T]) Lock(h H, p, n uintptr, register func(s Span) (T, error), resolve func(p uintptr, all, made []Reg[T]) (uintptr, error)) (uintptr, error) {
	if p == 0 || n == 0 || p+n < p {
		return 0, fmt.Errorf("lock %#x+%d: %w", p, n, sentinel.ErrInvalidArgument)
	}
	lo, hi := t.bounds(p, n)
	t.mu.Lock()
	t.flights.Settle(&t.mu, lo, hi)
	have, gaps, err := t.coverLocked(p, n, lo, hi)
	if err != nil {
		t.mu.Unlock()
		return 0, err
	}
	// References now, so that none of them goes while the gaps are
	// registered and resolve runs; they become the hold's.
	for _, r := range have {
		r.refs++
	}
	fs := make([]*inflight.Flight, len(gaps))
	for i, g := range gaps {
		fs[i] = t.flights.Start(g.Host, g.End())
	}
	t.mu.Unlock()

	made, err := t.registerAll(gaps, register)
	all := merge(have, made)
	var dev uintptr
	if err == nil {
		dev, err = resolve(p, views(all), views(made))
	}
	if err != nil {
		return 0, t.lockFailed(fs, have, made, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fs {
		t.flights.Land(f)
	}
	for _, r := range made {
		r.refs = 1
		t.insertLocked(r)
	}
	if len(made) > 0 {
		t.publishLocked()
	}
	k := key[H]{h, p}
	t.holds[k] = append(t.holds[k], all)
	return dev, nil
}

// coverLocked returns the registrations holding parts of [lo, hi), by
// address, and the runs none holds, cut in pieces of at most MaxPiece. An
// Exact table refuses a range overlapping a registration it does not lie in.
func (t *Table[H, T]) coverLocked(p, n, lo, hi uintptr) (have []*reg[T], gaps []Span, err error) {
	i := t.findLocked(lo)
	if t.cfg.Exact {
		if i < len(t.regs) && t.regs[i].Host < hi {
			r := t.regs[i]
			if r.contains(p, n) {
				return []*reg[T]{r}, nil, nil
			}
			how := "overlaps"
			if r.Host <= p {
				how = "runs past the end of"
			}
			return nil, nil, fmt.Errorf("%w: [%#x, +%d) %s the locked range [%#x, +%d)", t.cfg.Overlap, p, n, how, r.Host, r.Size)
		}
		return nil, []Span{{lo, hi - lo}}, nil
	}
	q := lo
	for ; i < len(t.regs) && t.regs[i].Host < hi; i++ {
		r := t.regs[i]
		if r.Host > q {
			gaps = t.pieces(gaps, Span{q, r.Host - q})
		}
		have = append(have, r)
		q = r.End()
	}
	if q < hi {
		gaps = t.pieces(gaps, Span{q, hi - q})
	}
	return have, gaps, nil
}

// pieces appends s to out cut in pieces of at most MaxPiece bytes.
func (t *Table[H, T]) pieces(out []Span, s Span) []Span {
	max := t.cfg.MaxPiece
	for max != 0 && s.Size > max {
		out = append(out, Span{s.Host, max})
		s = Span{s.Host + max, s.Size - max}
	}
	return append(out, s)
}

// findLocked returns the index of the first registration ending after p.
func (t *Table[H, T]) findLocked(p uintptr) int {
	return sort.Search(len(t.regs), func(i int) bool { return t.regs[i].End() > p })
}

// registerAll registers gaps in order, stopping at the first failure; it
// returns what it made.
func (t *Table[H, T]) registerAll(gaps []Span, register func(Span) (T, error)) ([]*reg[T], error) {
	var made []*reg[T]
	for _, g := range gaps {
		v, err := register(g)
		if err != nil {
			return made, err
		}
		made = append(made, &reg[T]{Reg: Reg[T]{Span: g, Val: v}})
	}
	return made, nil
}

// lockFailed undoes a Lock: it unregisters what it made, lands its flights
// and drops the references it took (the last one unregisters). A made
// registration the driver would not unregister is kept, unreferenced, so
// that ReleaseAll tries again.
func (t *Table[H, T]) lockFailed(fs []*inflight.Flight, have, made []*reg[T], err error) error {
	errs := []error{err}
	var kept []*reg[T]
	for _, r := range made {
		if uerr := t.cfg.Unregister(r.Reg); uerr != nil {
			errs = append(errs, uerr)
			kept = append(kept, r)
		}
	}
	t.mu.Lock()
	for _, f := range fs {
		t.flights.Land(f)
	}
	for _, r := range kept {
		t.insertLocked(r)
	}
	if len(kept) > 0 {
		t.publishLocked()
	}
	errs = append(errs, t.dropLocked(have))
	t.mu.Unlock()
	return errors.Join(errs...)
}

// dropLocked drops one reference on each of rs and unregisters those left
// with none. mu held on entry and return (released meanwhile).
func (t *Table[H, T]) dropLocked(rs []*reg[T]) error {
	var gone []*reg[T]
	for _, r := range rs {
		if r.refs--; r.refs == 0 {
			gone = append(gone, r)
		}
	}
	_, err := t.unregisterLocked(gone)
	return err
}

// unregisterLocked unregisters rs, which nothing references, each in
// flight meanwhile, and takes those done out of the table; it returns those
// still locked (the driver said sentinel.ErrStillLocked). mu held on entry
// and return (released meanwhile).
func (t *Table[H, T]) unregisterLocked(rs []*reg[T]) (still []*reg[T], err error) {
	if len(rs) == 0 {
		return nil, nil
	}
	fs := make([]*inflight.Flight, len(rs))
	for i, r := range rs {
		fs[i] = t.flights.Start(r.Host, r.End())
	}
	t.mu.Unlock()
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = t.cfg.Unregister(r.Reg)
	}
	t.mu.Lock()
	removed := false
	for i, r := range rs {
		t.flights.Land(fs[i])
		switch {
		case errs[i] == nil:
			t.removeLocked(r)
			removed = true
		case errors.Is(errs[i], sentinel.ErrStillLocked):
			still = append(still, r)
		}
	}
	if removed {
		t.publishLocked()
	}
	return still, errors.Join(errs...)
}

// Unlock drops h's newest lock at p; a registration left without
// references is unregistered. When that fails with sentinel.ErrStillLocked,
// the lock stays h's (less what was unregistered), so that Unlock may be
// retried; on another failure the registration stays, unreferenced, for
// the next lock of its pages to reuse and ReleaseAll to try again.
func (t *Table[H, T]) Unlock(h H, p uintptr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := key[H]{h, p}
	hs := t.holds[k]
	if len(hs) == 0 {
		return fmt.Errorf("unlock %#x: %w", p, t.cfg.NotLocked)
	}
	g := hs[len(hs)-1]
	if hs = hs[:len(hs)-1]; len(hs) == 0 {
		delete(t.holds, k)
	} else {
		t.holds[k] = hs
	}
	var gone []*reg[T]
	for _, r := range g {
		if r.refs--; r.refs == 0 {
			gone = append(gone, r)
		}
	}
	still, err := t.unregisterLocked(gone)
	if len(still) > 0 {
		var back []*reg[T]
		for _, r := range g {
			if !r.gone {
				r.refs++
				back = append(back, r)
			}
		}
		t.holds[k] = append(t.holds[k], back)
	}
	return err
}

// ReleaseAll drops every lock h holds (its Close), and tries again to
// unregister the registrations whose unregister failed before.
func (t *Table[H, T]) ReleaseAll(h H) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var drop []*reg[T]
	for k, hs := range t.holds {
		if k.h != h {
			continue
		}
		delete(t.holds, k)
		for _, g := range hs {
			for _, r := range g {
				if r.refs--; r.refs == 0 {
					drop = append(drop, r)
				}
			}
		}
	}
	for _, r := range t.regs {
		if r.refs == 0 && t.flights.Overlap(r.Host, r.End()) == nil && !containsReg(drop, r) {
			drop = append(drop, r)
		}
	}
	_, err := t.unregisterLocked(drop)
	return err
}

func containsReg[T any](rs []*reg[T], r *reg[T]) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// Holds reports whether a registration made here holds address p, once no
// flight shares a page with p or [lo, hi) (hi > lo; pass p, p+1 for none):
// until then the driver's answer about those pages is about a registration
// of ours not yet recorded, or on its way out.
func (t *Table[H, T]) Holds(p, lo, hi uintptr) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		f := t.flights.Overlap(p, p+1)
		if f == nil {
			f = t.flights.Overlap(lo, hi)
		}
		if f == nil {
			break
		}
		t.mu.Unlock()
		<-f.Done()
		t.mu.Lock()
	}
	i := t.findLocked(p)
	return i < len(t.regs) && t.regs[i].Host <= p
}

// insertLocked adds r, which overlaps no registration.
func (t *Table[H, T]) insertLocked(r *reg[T]) {
	i := t.findLocked(r.Host)
	t.regs = append(t.regs, nil)
	copy(t.regs[i+1:], t.regs[i:])
	t.regs[i] = r
}

// removeLocked takes r out of the table.
func (t *Table[H, T]) removeLocked(r *reg[T]) {
	i := t.findLocked(r.Host)
	if i < len(t.regs) && t.regs[i] == r {
		t.regs = append(t.regs[:i], t.regs[i+1:]...)
	}
	r.gone = true
}

// merge returns a and b, each by address and disjoint, as one list by address.
func merge[T any](a, b []*reg[T]) []*reg[T] {
	out := make([]*reg[T], 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Host < b[0].Host {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

func views[T any](rs []*reg[T]) []Reg[T] {
	out := make([]Reg[T], len(rs))
	for i, r := range rs {
		out[i] = r.Reg
	}
	return out
}

// Snapshot is the registrations by start, with their references (tests
// and diagnostics).
func (t *Table[H, T]) Snapshot() map[uintptr]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[uintptr]int, len(t.regs))
	for _, r := range t.regs {
		m[r.Host] = r.refs
	}
	return m
}
