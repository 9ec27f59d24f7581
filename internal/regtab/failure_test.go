package regtab

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// A resolve that refuses the lock (CUDA: the device does not see the range
// as one) leaves the table and the driver as they were, also when the lock
// shared a registration: that one keeps its other holder's reference.
func TestResolveFailureLeavesTableUnchanged(t *testing.T) {
	d := newDriver()
	tab := newTable(d, false, 0)
	const p = 1 << 30
	_, err := tab.Lock(0, p, page, d.register, resolve)
	require.NoError(t, err)
	before := tab.Snapshot()
	refuse := func(uintptr, []Reg[uintptr], []Reg[uintptr]) (uintptr, error) { return 0, errDriver }
	_, err = tab.Lock(1, p+100, 3*page, d.register, refuse)
	require.ErrorIs(t, err, errDriver)
	require.Equal(t, before, tab.Snapshot())
	require.Len(t, d.regs, 1, "the new pages were unregistered")
	require.ErrorIs(t, tab.Unlock(1, p+100), ErrNotLocked)
	require.NoError(t, tab.Unlock(0, p))
	require.Empty(t, d.regs)
	require.Empty(t, d.misuse)
}

// An unregister that fails keeps the registration, unreferenced: the next
// lock of its pages reuses it (no second registration of a page), and
// ReleaseAll tries again.
func TestUnregisterFailureKeepsRegistration(t *testing.T) {
	d := newDriver()
	tab := newTable(d, false, 0)
	const p = 1 << 30
	_, err := tab.Lock(0, p, page, d.register, resolve)
	require.NoError(t, err)
	d.failUnreg = errDriver
	require.ErrorIs(t, tab.Unlock(0, p), errDriver)
	require.Equal(t, map[uintptr]int{p: 0}, tab.Snapshot())
	require.ErrorIs(t, tab.Unlock(0, p), ErrNotLocked, "the lock itself is gone")

	calls := d.calls
	_, err = tab.Lock(1, p, 100, d.register, resolve)
	require.NoError(t, err)
	require.Equal(t, calls, d.calls, "reused")
	require.NoError(t, tab.Unlock(1, p))
	require.Empty(t, d.regs)

	_, err = tab.Lock(0, p, page, d.register, resolve)
	require.NoError(t, err)
	d.failUnreg = errDriver
	require.ErrorIs(t, tab.Unlock(0, p), errDriver)
	require.NoError(t, tab.ReleaseAll(7), "another holder's close tries again")
	require.Empty(t, tab.Snapshot())
	require.Empty(t, d.regs)
	require.Empty(t, d.misuse)
}

// An unregister failing with sentinel.ErrStillLocked keeps the hold too, so
// that the caller's retry unregisters (the HSA plugin's contract with the
// registry).
func TestStillLockedKeepsTheHold(t *testing.T) {
	d := newDriver()
	tab := newTable(d, true, 0)
	const p = 1 << 30
	_, err := tab.Lock(0, p, page, d.register, resolve)
	require.NoError(t, err)
	d.failUnreg = fmt.Errorf("busy: %w", sentinel.ErrStillLocked)
	require.ErrorIs(t, tab.Unlock(0, p), sentinel.ErrStillLocked)
	require.Equal(t, map[uintptr]int{p: 1}, tab.Snapshot())
	require.NoError(t, tab.Unlock(0, p), "the retry")
	require.Empty(t, tab.Snapshot())
	require.Empty(t, d.regs)
}

// ReleaseAll drops a holder's locks and no other's.
func TestReleaseAll(t *testing.T) {
	d := newDriver()
	tab := newTable(d, false, 0)
	const p = 1 << 30
	for _, h := range []int{0, 0, 1} {
		_, err := tab.Lock(h, p+uintptr(h)*8*page, page, d.register, resolve)
		require.NoError(t, err)
	}
	_, err := tab.Lock(0, p+20*page, page, d.register, resolve)
	require.NoError(t, err)
	require.NoError(t, tab.ReleaseAll(0))
	require.Equal(t, map[uintptr]int{p + 8*page: 1}, tab.Snapshot())
	require.NoError(t, tab.Unlock(1, p+8*page))
	require.Empty(t, d.regs)
}

// Copies are cut at every registration edge they cross, and not at all
// inside one registration or outside all.
func TestCut(t *testing.T) {
	d := newDriver()
	tab := newTable(d, false, 2*page)
	const p = 1 << 30
	_, err := tab.Lock(0, p, 3*page, d.register, resolve) // pieces [0,2) [2,3)
	require.NoError(t, err)
	_, err = tab.Lock(0, p+5*page, page, d.register, resolve)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		p, n uintptr
		want []Span
	}{
		{"inside one", p + 10, 100, nil},
		{"outside all", p + 8*page, page, nil},
		{"across pieces", p + page, 2 * page, []Span{{p + page, page}, {p + 2*page, page}}},
		{"registered then pageable", p + 2*page, 2 * page, []Span{{p + 2*page, page}, {p + 3*page, page}}},
		{"pageable, registered, pageable", p + 4*page, 3 * page, []Span{{p + 4*page, page}, {p + 5*page, page}, {p + 6*page, page}}},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, tab.Cut(tc.p, tc.n)) })
	}
	require.NoError(t, tab.ReleaseAll(0))
	require.Nil(t, tab.Cut(p+page, 2*page))
}

// Borrow references the registrations a copy reads and registers what the
// gap asks for the transfer; Return drops it all, the last reference
// unregistering.
func TestBorrow(t *testing.T) {
	d := newDriver()
	tab := newTable(d, true, 0)
	const p = 1 << 30
	dev, err := tab.Lock(0, p+page, page, d.register, resolve)
	require.NoError(t, err)
	gap := func(q, end uintptr) (uintptr, uintptr, bool, error) {
		v, err := d.register(Span{q, end - q})
		return end - q, v, true, err
	}
	parts, loan, err := tab.Borrow(p+100, 3*page, gap)
	require.NoError(t, err)
	require.Equal(t, []Part[uintptr]{
		{Off: 0, N: page - 100, Base: p + 100, Val: p + 100 + 1<<40},
		{Off: page - 100, N: page, Base: p + page, Val: dev},
		{Off: 2*page - 100, N: page + 100, Base: p + 2*page, Val: p + 2*page + 1<<40},
	}, parts)
	require.Equal(t, map[uintptr]int{p + 100: 1, p + page: 2, p + 2*page: 1}, tab.Snapshot())
	require.NoError(t, tab.Unlock(0, p+page))
	require.Len(t, d.regs, 3, "the copy still holds the lock")
	require.NoError(t, tab.Return(loan))
	require.Empty(t, tab.Snapshot())
	require.Empty(t, d.regs)

	// A failing gap returns what was borrowed before it.
	_, err = tab.Lock(0, p, page, d.register, resolve)
	require.NoError(t, err)
	_, _, err = tab.Borrow(p, 2*page, func(q, end uintptr) (uintptr, uintptr, bool, error) { return 0, 0, false, errDriver })
	require.ErrorIs(t, err, errDriver)
	require.Equal(t, map[uintptr]int{p: 1}, tab.Snapshot())
	require.NoError(t, tab.Unlock(0, p))
	require.Empty(t, d.misuse)
}

// Holders locking and unlocking overlapping ranges at once, with the driver
// calls outside the mutex: the driver never sees a page registered twice or
// an unregister of something not registered, every lock succeeds, and
// nothing is left at the end. Run with -race.
func TestConcurrentLockers(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			d := newDriver()
			tab := newTable(d, exact, 2*page)
			const p = 1 << 30
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for h := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 300 {
						off := uintptr((h+i)%4) * page / 2
						n := page + uintptr(i%3)*page
						if exact {
							off, n = 0, 4*page // every lock the same range: shared or made
						}
						if _, err := tab.Lock(h, p+off, n, d.register, resolve); err != nil {
							errs <- err
							return
						}
						if i%5 == 0 {
							if _, loan, err := tab.Borrow(p+off, n, func(q, end uintptr) (uintptr, uintptr, bool, error) { return end - q, q, false, nil }); err != nil {
								errs <- err
								return
							} else if err := tab.Return(loan); err != nil {
								errs <- err
								return
							}
						}
						if err := tab.Unlock(h, p+off); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Empty(t, d.misuse)
			require.Empty(t, d.regs)
			require.Empty(t, tab.Snapshot())
		})
	}
}
