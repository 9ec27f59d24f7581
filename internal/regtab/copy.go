package regtab

import (
	"errors"
	"sort"
)

// Copies and the registrations' edges. The note on every copy function of
// the CUDA driver API: "Memory regions requested must be either entirely
// registered with CUDA, or in the case of host pageable transfers, not
// registered at all. Memory regions spanning over allocations that are both
// registered and not registered with CUDA are not supported and will return
// CUDA_ERROR_INVALID_VALUE." Nothing promises either that one copy may run
// from one registration into the next (two adjacent locks, the pieces of one
// long lock). So a copy whose host range crosses an edge of a registration
// made here is issued as one copy per part, each in one registration or in
// none (Cut, lock-free); HSA copies take the agent pointer of each part from
// the registration that holds it (Borrow).

// publishLocked stores the registrations' spans for Cut. Registering is rare
// (once per pinned chunk), copies are not.
func (t *Table[H, T]) publishLocked() {
	s := make([]Span, len(t.regs))
	for i, r := range t.regs {
		s[i] = r.Span
	}
	t.spans.Store(&s)
}

// Cut splits host range [p, p+n) at the edges of the registrations it
// touches. nil: one part, the whole range (no registration made here
// touches it, or one holds it all); the common case costs an atomic load
// and a binary search. It reads the table without its mutex, so a
// registration made or dropped meanwhile may or may not be seen: a copy
// from memory being locked or unlocked at once is the caller's race.
func (t *Table[H, T]) Cut(p, n uintptr) []Span {
	sp := t.spans.Load()
	if sp == nil || len(*sp) == 0 || n == 0 {
		return nil
	}
	s, end := *sp, p+n
	i := sort.Search(len(s), func(i int) bool { return s[i].End() > p })
	if i == len(s) || s[i].Host >= end || s[i].contains(p, n) {
		return nil
	}
	var out []Span
	q := p
	for ; i < len(s) && s[i].Host < end; i++ {
		if s[i].Host > q {
			out = append(out, Span{q, s[i].Host - q})
			q = s[i].Host
		}
		e := min(end, s[i].End())
		out = append(out, Span{q, e - q})
		q = e
	}
	if q < end {
		out = append(out, Span{q, end - q})
	}
	return out
}

// Part is a part of a copy's host range, [p+Off, p+Off+N), and what holds
// it: Val is the value of the registration starting at Base, or what gap
// answered for a part no registration held (Base is then the part's start).
type Part[T any] struct {
	Off, N, Base uintptr
	Val          T
}

// Loan is the references a copy holds on registrations until it completed
// (Borrow); Return drops them.
type Loan[T any] struct{ regs []*reg[T] }

// Borrow splits host range [p, p+n) for a copy that must hold what it
// reads: inside a registration, a part referencing it (so that it outlives
// the copy); elsewhere, what gap answers for the part [q, end) up to the
// next registration, called without the mutex with that part in flight.
// When gap registered [q, q+size) for the transfer (registered), it is
// recorded here, referenced by the loan, so that other copies and locks
// share it and the last one unregisters it. For Exact tables. On failure
// nothing stays borrowed.
func (t *Table[H, T]) Borrow(p, n uintptr, gap func(q, end uintptr) (size uintptr, v T, registered bool, err error)) ([]Part[T], Loan[T], error) {
	var parts []Part[T]
	var loan Loan[T]
	end := p + n
	t.mu.Lock()
	for q := p; q < end; {
		t.flights.Settle(&t.mu, q, end)
		i := t.findLocked(q)
		if i < len(t.regs) && t.regs[i].Host <= q {
			r := t.regs[i]
			k := min(end, r.End()) - q
			r.refs++
			loan.regs = append(loan.regs, r)
			parts = append(parts, Part[T]{Off: q - p, N: k, Base: r.Host, Val: r.Val})
			q += k
			continue
		}
		stop := end
		if i < len(t.regs) && t.regs[i].Host < end {
			stop = t.regs[i].Host
		}
		var (
			k    uintptr
			v    T
			made bool
			err  error
		)
		t.flights.Outside(&t.mu, q, stop, func() { k, v, made, err = gap(q, stop) })
		if err == nil && (k == 0 || k > stop-q) {
			err = errors.New("regtab: gap answered a size outside its range")
		}
		if err != nil {
			err = errors.Join(err, t.returnLocked(loan))
			t.mu.Unlock()
			return nil, Loan[T]{}, err
		}
		if made {
			r := &reg[T]{Reg: Reg[T]{Span: Span{q, k}, Val: v}, refs: 1}
			t.insertLocked(r)
			t.publishLocked()
			loan.regs = append(loan.regs, r)
		}
		parts = append(parts, Part[T]{Off: q - p, N: k, Base: q, Val: v})
		q += k
	}
	t.mu.Unlock()
	return parts, loan, nil
}

// Return drops a loan's references; the last reference of a registration
// unregisters it (a failure keeps it, unreferenced, for ReleaseAll).
func (t *Table[H, T]) Return(l Loan[T]) error {
	if len(l.regs) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.returnLocked(l)
}

func (t *Table[H, T]) returnLocked(l Loan[T]) error { return t.dropLocked(l.regs) }

// Join returns the references of a and b as one loan.
func (l Loan[T]) Join(o Loan[T]) Loan[T] {
	return Loan[T]{regs: append(append([]*reg[T](nil), l.regs...), o.regs...)}
}
