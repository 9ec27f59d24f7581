package pinreg

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHammer has goroutines lock, look up and unlock shared ranges (whose
// entries are created and erased over and over while others hit them) and
// private ones, explicitly and as mappings.
func TestHammer(t *testing.T) {
	const (
		workers = 6
		shared  = 4
	)
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	f := newFake()
	r := New(f)
	sharedAt := func(i int) uintptr { return base + uintptr(i)*0x3000 + 64 } // shares pages with neighbours
	const sharedLen = 0x2000
	// A long-lived entry every worker hits each iteration: more hits than an
	// entry's word holds, so hit folding races with the lock-free path.
	anchor := base + 0x800_0000
	_, err := r.Lock(anchor, 1<<20)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			fail := func(err error) { errs <- err }
			priv := base + 0x100_0000 + uintptr(w)*0x10_0000
			x := uint32(w*7919 + 1)
			for i := 0; i < iters; i++ {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				s := sharedAt(int(x % shared))
				// Shared: the whole range, then a sub-range while holding it.
				if _, err := r.Lock(s, sharedLen); err != nil {
					fail(err)
					return
				}
				sub := s + uintptr(x>>8)%(sharedLen-16)
				dev, err := r.Lock(sub, 16)
				if err != nil || dev != sub+devOffset {
					fail(errors.Join(err, errors.New("bad sub-range dev")))
					return
				}
				if d, ok := r.Lookup(sub + 3); !ok || d != sub+3+devOffset {
					fail(errors.New("lookup of a held range failed"))
					return
				}
				d, locked, err := r.LockMapped(s+8, 8, MapMandatory)
				if err != nil || !locked || d != s+8+devOffset {
					fail(errors.Join(err, errors.New("LockMapped of a held range")))
					return
				}
				if err := r.Unlock(sub + 15); err != nil {
					fail(err)
					return
				}
				if err := r.UnlockUnmapped(s+sharedLen-1, MapMandatory); err != nil {
					fail(err)
					return
				}
				if err := r.Unlock(s); err != nil {
					fail(err)
					return
				}
				if _, err := r.Lock(anchor+uintptr(x%4096)*64, 64); err != nil {
					fail(err)
					return
				}
				if err := r.Unlock(anchor + uintptr(x%4096)*64); err != nil {
					fail(err)
					return
				}
				// Private: lock, unlock twice over, and a mapping alone.
				p := priv + uintptr(x%64)*0x1000 + uintptr(x>>20)%128
				if _, err := r.Lock(p, 100); err != nil {
					fail(err)
					return
				}
				if _, ok := r.Lookup(p + 99); !ok {
					fail(errors.New("private lookup"))
					return
				}
				if err := r.Unlock(p); err != nil {
					fail(err)
					return
				}
				if err := r.Unlock(p); !errors.Is(err, ErrNotLocked) {
					fail(errors.Join(err, errors.New("double unlock should be ErrNotLocked")))
					return
				}
				if _, _, err := r.LockMapped(p, 64, MapMandatory); err != nil {
					fail(err)
					return
				}
				if err := r.UnlockUnmapped(p+63, MapMandatory); err != nil {
					fail(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, r.Len())
	require.NoError(t, r.Unlock(anchor))
	require.Zero(t, r.Len())
	locks, unlocks, held, problems := f.snapshot()
	require.Empty(t, problems)
	require.Empty(t, held)
	require.Equal(t, locks, unlocks)
	require.Equal(t, 1, r.pt.nodes())
	st := r.Stats()
	require.Zero(t, st.LockedBytes)
	require.Equal(t, uint64(locks), st.VendorLocks)
	require.Equal(t, uint64(6*workers*iters+1), st.Hits+st.Misses, "every lock is a hit or a miss")
	t.Logf("vendor locks %d, hits %d, misses %d", locks, st.Hits, st.Misses)
}
