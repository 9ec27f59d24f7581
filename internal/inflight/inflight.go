package inflight

import (
	"os"
	"sync"
)

// Table is the set of ranges in flight. The zero value is empty and ready.
type Table struct {
	flights []*Flight
}

// Flight is a range whose driver call runs without the owner's mutex.
type Flight struct {
	lo, hi uintptr
	done   chan struct{}
}

// Done is closed when the flight lands.
func (f *Flight) Done() <-chan struct{} { return f.done }

// page is the system's page size (4 KiB, or 16 or 64 KiB on some arm64
// kernels): the unit drivers lock.
var page = uintptr(os.Getpagesize())

// Start marks [p, end) in flight (owner's mutex held).
func (t *Table) Start(p, end uintptr) *Flight {
	f := &Flight{lo: p, hi: end, done: make(chan struct{})}
	t.flights = append(t.flights, f)
	return f
}

// Land ends flight f and wakes who waits for it (owner's mutex held).
func (t *Table) Land(f *Flight) {
	for i, g := range t.flights {
		if g == f {
			t.flights = append(t.flights[:i], t.flights[i+1:]...)
			break
		}
	}
	close(f.done)
}

// Overlap returns a flight sharing a page with [p, end), or nil (owner's
// mutex held). An end that rounds past the top of the address space counts
// as the top, so Overlap(0, ^uintptr(0)) finds any flight.
func (t *Table) Overlap(p, end uintptr) *Flight {
	lo, hi := p&^(page-1), end+page-1
	if hi < end {
		hi = ^uintptr(0)
	} else {
		hi &^= page - 1
	}
	for _, f := range t.flights {
		if lo < f.hi && f.lo < hi {
			return f
		}
	}
	return nil
}

// Len is the number of flights (owner's mutex held).
func (t *Table) Len() int { return len(t.flights) }

// Settle waits, dropping mu meanwhile, until no flight shares a page with
// [p, end). mu is held before and after.
func (t *Table) Settle(mu sync.Locker, p, end uintptr) {
	for f := t.Overlap(p, end); f != nil; f = t.Overlap(p, end) {
		mu.Unlock()
		<-f.done
		mu.Lock()
	}
}

// Outside runs call, a driver call for [p, end), with [p, end) in flight and
// mu released. mu is held before and after, also when call panics.
func (t *Table) Outside(mu sync.Locker, p, end uintptr, call func()) {
	f := t.Start(p, end)
	mu.Unlock()
	defer func() {
		mu.Lock()
		t.Land(f)
	}()
	call()
}
