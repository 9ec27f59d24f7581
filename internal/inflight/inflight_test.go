package inflight

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// landed reports whether c is closed.
func landed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestOverlapByWholePages(t *testing.T) {
	pg := page
	base := 64 * pg // a flight at [base+16, base+32): inside one page
	for _, tc := range []struct {
		name    string
		p, end  uintptr
		overlap bool
	}{
		{"the same bytes", base + 16, base + 32, true},
		{"other bytes of the same page, before", base, base + 8, true},
		{"other bytes of the same page, after", base + pg - 8, base + pg, true},
		{"ends on the page's first byte", base - pg, base + 1, true},
		{"the previous page, up to the boundary", base - pg, base, false},
		{"the next page", base + pg, base + 2*pg, false},
		{"a range spanning it", base - 8*pg, base + 8*pg, true},
		{"far away", 4 * base, 4*base + pg, false},
		{"everything", 0, ^uintptr(0), true},
		{"an end rounding past the top", base + 16, ^uintptr(0) - 1, true},
		{"the top page only", ^uintptr(0) &^ (pg - 1), ^uintptr(0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tb Table
			f := tb.Start(base+16, base+32)
			got := tb.Overlap(tc.p, tc.end)
			if tc.overlap {
				require.Same(t, f, got)
			} else {
				require.Nil(t, got)
			}
			tb.Land(f)
			require.Nil(t, tb.Overlap(tc.p, tc.end), "landed")
			require.Zero(t, tb.Len())
		})
	}
}

func TestLandWakesOnlyItsWaiters(t *testing.T) {
	var tb Table
	a := tb.Start(0x10000, 0x20000)
	b := tb.Start(0x40000, 0x50000)
	require.Equal(t, 2, tb.Len())
	tb.Land(a)
	require.True(t, landed(a.Done()))
	require.False(t, landed(b.Done()), "another flight's waiters stay asleep")
	require.Same(t, b, tb.Overlap(0, ^uintptr(0)))
	tb.Land(b)
	require.True(t, landed(b.Done()))
	require.Zero(t, tb.Len())
}

// TestSettle: a caller of an overlapping range waits, without the mutex,
// until every flight over its range has landed; one of another range does
// not wait.
func TestSettle(t *testing.T) {
	pg := page
	for _, tc := range []struct {
		name   string
		p, end uintptr
		waits  bool
	}{
		{"an overlapping range", 10 * pg, 11 * pg, true},
		{"the same page", 12*pg - 1, 12 * pg, true},
		{"everything", 0, ^uintptr(0), true},
		{"another page", 20 * pg, 21 * pg, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				tb   Table
				left atomic.Pointer[Flight]
			)
			mu.Lock()
			f1 := tb.Start(10*pg, 11*pg+8) // two flights over the range: Settle looks again after each
			f2 := tb.Start(11*pg, 12*pg)
			mu.Unlock()
			settled := make(chan struct{})
			go func() {
				mu.Lock()
				tb.Settle(&mu, tc.p, tc.end)
				left.Store(tb.Overlap(tc.p, tc.end))
				mu.Unlock()
				close(settled)
			}()
			if !tc.waits {
				select {
				case <-settled:
				case <-time.After(5 * time.Second):
					t.Fatal("waited for a flight of another range")
				}
			}
			// The waiter does not hold mu while it waits.
			for _, f := range []*Flight{f1, f2} {
				mu.Lock()
				tb.Land(f)
				mu.Unlock()
			}
			select {
			case <-settled:
			case <-time.After(5 * time.Second):
				t.Fatal("Settle did not wake when the flights landed")
			}
			require.Nil(t, left.Load(), "Settle returned with a flight over its range")
		})
	}
}

// TestSettleWaitsForEveryFlight: after the first flight lands, a waiter
// over both still waits for the second.
func TestSettleWaitsForEveryFlight(t *testing.T) {
	var (
		mu sync.Mutex
		tb Table
	)
	mu.Lock()
	f1 := tb.Start(page, 2*page)
	f2 := tb.Start(3*page, 4*page)
	mu.Unlock()
	settled := make(chan struct{})
	go func() {
		mu.Lock()
		tb.Settle(&mu, 0, ^uintptr(0))
		mu.Unlock()
		close(settled)
	}()
	mu.Lock()
	tb.Land(f1)
	mu.Unlock()
	time.Sleep(20 * time.Millisecond) // give the waiter the chance to stop too early
	require.False(t, landed(settled), "Settle returned with a flight over its range")
	mu.Lock()
	tb.Land(f2)
	mu.Unlock()
	<-settled
}

func TestOutsideReleasesTheMutex(t *testing.T) {
	var (
		mu sync.Mutex
		tb Table
	)
	mu.Lock()
	tb.Outside(&mu, page, 2*page, func() {
		require.True(t, mu.TryLock(), "the call runs without the mutex")
		require.NotNil(t, tb.Overlap(page, page+1), "and with its range in flight")
		mu.Unlock()
	})
	require.False(t, mu.TryLock(), "the mutex is held again after")
	require.Zero(t, tb.Len())
	mu.Unlock()

	mu.Lock()
	require.Panics(t, func() { tb.Outside(&mu, page, 2*page, func() { panic("driver") }) })
	require.False(t, mu.TryLock(), "held again after a panic")
	require.Zero(t, tb.Len(), "landed after a panic")
	mu.Unlock()
}

// TestNoTwoOverlappingCalls hammers one table from many goroutines on ranges
// that share pages: no two calls for overlapping ranges ever run at once,
// and no waiter sleeps through the landing it waited for (the test would
// hang). Run it with -race.
func TestNoTwoOverlappingCalls(t *testing.T) {
	var (
		mu    sync.Mutex
		tb    Table
		busy  [8]atomic.Int32 // calls running over each page
		calls atomic.Int64
		clash atomic.Int64 // calls that found another over one of their pages
	)
	const pages = len(busy)
	workers, rounds := 4*runtime.GOMAXPROCS(0), 300
	if testing.Short() {
		rounds = 50
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				first := (w + i) % pages
				last := min(pages-1, first+(w*7+i)%3)
				// Byte ranges that start and end inside pages: only page
				// rounding keeps them apart.
				p, end := uintptr(first)*page+page/2, uintptr(last)*page+page/2+1
				mu.Lock()
				tb.Settle(&mu, p, end)
				tb.Outside(&mu, p, end, func() {
					for pg := first; pg <= last; pg++ {
						if busy[pg].Add(1) != 1 {
							clash.Add(1)
						}
					}
					if i%8 == 0 {
						runtime.Gosched()
					}
					for pg := first; pg <= last; pg++ {
						busy[pg].Add(-1)
					}
					calls.Add(1)
				})
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("a waiter was never woken")
	}
	require.Zero(t, clash.Load(), "calls over overlapping ranges ran at once")
	require.Equal(t, int64(workers*rounds), calls.Load())
	require.Zero(t, tb.Len())
}
