package regtab

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var page = uintptr(os.Getpagesize())

// driver is a fake driver as strict as cuMemHostRegister: a page registered
// twice, or an unregister of a range that is not exactly one registration,
// is a misuse; failures are injected per call.
type driver struct {
	mu         sync.Mutex
	regs       map[uintptr]uintptr // start → size
	pages      map[uintptr]bool
	calls      int // register calls
	unregs     int
	misuse     []string
	failReg    int   // the failReg-th register call from now fails (1: the next)
	failUnreg  error // the next unregister fails with it
	registered []Span
}

func newDriver() *driver { return &driver{regs: map[uintptr]uintptr{}, pages: map[uintptr]bool{}} }

var errDriver = errors.New("driver says no")

func (d *driver) register(s Span) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.failReg > 0 {
		if d.failReg--; d.failReg == 0 {
			return 0, errDriver
		}
	}
	for pg := s.Host &^ (page - 1); pg < s.End(); pg += page {
		if d.pages[pg] {
			d.misuse = append(d.misuse, fmt.Sprintf("page %#x registered twice", pg))
			return 0, errors.New("already registered")
		}
	}
	for pg := s.Host &^ (page - 1); pg < s.End(); pg += page {
		d.pages[pg] = true
	}
	d.regs[s.Host] = s.Size
	d.registered = append(d.registered, s)
	return s.Host + 1<<40, nil // the device address
}

func (d *driver) unregister(r Reg[uintptr]) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.failUnreg; err != nil {
		d.failUnreg = nil
		return err
	}
	if d.regs[r.Host] != r.Size {
		d.misuse = append(d.misuse, fmt.Sprintf("unregister of %#x+%d, not a registration", r.Host, r.Size))
		return errors.New("not registered")
	}
	d.unregs++
	delete(d.regs, r.Host)
	for pg := r.Host &^ (page - 1); pg < r.End(); pg += page {
		delete(d.pages, pg)
	}
	return nil
}

// resolve is the device address of p, which every registration must agree
// on (one contiguous device range, as CUDA's plugin checks).
func resolve(p uintptr, all, made []Reg[uintptr]) (uintptr, error) {
	for _, r := range all {
		if r.Val-r.Host != all[0].Val-all[0].Host {
			return 0, errors.New("not contiguous")
		}
	}
	return all[0].Val + (p - all[0].Host), nil
}

func newTable(d *driver, exact bool, max uintptr) *Table[int, uintptr] {
	return New[int, uintptr](Config[uintptr]{Exact: exact, MaxPiece: max, Unregister: d.unregister})
}

// op is one step of a case: a lock (n > 0) or an unlock (n == 0) by holder
// h at page offset off (in bytes, from a page-aligned base).
type op struct {
	h      int
	off, n uintptr
	err    error // the error it must return
	regs   int   // driver registrations live after it
	calls  int   // register calls made by it
	failAt int   // this lock's failAt-th register call fails (0: none)
}

func TestTable(t *testing.T) {
	const base = 1 << 30
	for _, tc := range []struct {
		name  string
		exact bool
		max   uintptr
		ops   []op
	}{
		{"adjacent ranges register apart", false, 0, []op{
			{h: 0, off: 0, n: page, regs: 1, calls: 1},
			{h: 0, off: page, n: page, regs: 2, calls: 1},
			{h: 0, off: 0, regs: 1},
			{h: 0, off: page, regs: 0},
		}},
		{"two ranges in one page share its registration", false, 0, []op{
			{h: 0, off: 100, n: 100, regs: 1, calls: 1},
			{h: 0, off: 1000, n: 100, regs: 1, calls: 0},
			{h: 0, off: 100, regs: 1},
			{h: 0, off: 1000, regs: 0},
		}},
		{"a range running into a shared page registers only the new pages", false, 0, []op{
			{h: 0, off: 0, n: 100, regs: 1, calls: 1},
			{h: 1, off: page - 64, n: 2 * page, regs: 2, calls: 1},
			{h: 0, off: 0, regs: 2},
			{h: 1, off: page - 64, regs: 0},
		}},
		{"contained range shares, whoever unlocks first", false, 0, []op{
			{h: 0, off: 0, n: 4 * page, regs: 1, calls: 1},
			{h: 0, off: page, n: page, regs: 1, calls: 0},
			{h: 0, off: 0, regs: 1},
			{h: 0, off: page, regs: 0},
		}},
		{"two devices share one registration until the last unlock", false, 0, []op{
			{h: 0, off: 0, n: 4 * page, regs: 1, calls: 1},
			{h: 1, off: 0, n: 4 * page, regs: 1, calls: 0},
			{h: 0, off: 0, regs: 1},
			{h: 0, off: 0, err: ErrNotLocked, regs: 1},
			{h: 1, off: 0, regs: 0},
		}},
		{"long range in pieces", false, 2 * page, []op{
			{h: 0, off: 0, n: 5 * page, regs: 3, calls: 3},
			{h: 1, off: 3 * page, n: page, regs: 3, calls: 0},
			{h: 0, off: 0, regs: 1},
			{h: 1, off: 3 * page, regs: 0},
		}},
		{"a failed register leaves the table as it was", false, page, []op{
			{h: 0, off: 0, n: page, regs: 1, calls: 1},
			{h: 1, off: 0, n: 3 * page, failAt: 2, err: errDriver, regs: 1, calls: 2},
			{h: 0, off: 0, regs: 0},
			{h: 1, off: 0, err: ErrNotLocked},
		}},
		{"a failed later piece undoes the earlier ones", false, page, []op{
			{h: 0, off: 0, n: 3 * page, failAt: 2, err: errDriver, regs: 0, calls: 2},
			{h: 0, off: 0, n: 3 * page, regs: 3, calls: 3},
			{h: 0, off: 0, regs: 0},
		}},
		{"exact: contained shares", true, 0, []op{
			{h: 0, off: 0, n: 4 * page, regs: 1, calls: 1},
			{h: 1, off: 100, n: 100, regs: 1, calls: 0},
			{h: 0, off: 0, regs: 1},
			{h: 1, off: 100, regs: 0},
		}},
		{"exact: partial overlap refused", true, 0, []op{
			{h: 0, off: page, n: page, regs: 1, calls: 1},
			{h: 0, off: page + 100, n: page, err: ErrOverlap, regs: 1},
			{h: 0, off: 0, n: page + 1, err: ErrOverlap, regs: 1},
			{h: 0, off: page, regs: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver()
			tab := newTable(d, tc.exact, tc.max)
			for i, o := range tc.ops {
				calls := d.calls
				d.failReg = o.failAt
				var err error
				if o.n > 0 {
					var dev uintptr
					dev, err = tab.Lock(o.h, base+o.off, o.n, d.register, resolve)
					if err == nil {
						require.Equal(t, base+o.off+1<<40, dev, "step %d: the device address", i)
					}
				} else {
					err = tab.Unlock(o.h, base+o.off)
				}
				if o.err != nil {
					require.ErrorIs(t, err, o.err, "step %d", i)
				} else {
					require.NoError(t, err, "step %d", i)
				}
				require.Equal(t, o.regs, len(d.regs), "step %d: live registrations", i)
				require.Equal(t, o.regs, len(tab.Snapshot()), "step %d: the table agrees with the driver", i)
				require.Equal(t, o.calls, d.calls-calls, "step %d: register calls", i)
			}
			require.Empty(t, d.misuse)
			require.Empty(t, tab.Snapshot())
			require.Nil(t, tab.Cut(base, 8*page))
		})
	}
}
