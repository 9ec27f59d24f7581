package alloc_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// The hammer of issue 9: goroutines allocate pinned blocks, lock and unlock
// inside them, try to unlock what they never locked, and now and then Trim
// or Shutdown (which must refuse while they hold a pinned block); between
// rounds, with nothing in flight, VmLck, the registries and the pinned
// statistics agree exactly.
func TestPinnedHammer(t *testing.T) {
	alloc.Trim()
	base := leakcheck.Start()
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	b, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithAlignment(256), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	dev, err := target.Get(target.DefaultDevice())
	require.NoError(t, err)
	const workers, rounds, perRound = 4, 5, 400
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				fail := func(format string, args ...any) {
					errs <- fmt.Errorf("worker %d: "+format, append([]any{w}, args...)...)
				}
				var live []unsafe.Pointer
				for i := 0; i < perRound; i++ {
					al := a
					if i%3 == 0 {
						al = b
					}
					n := uintptr((i*97+w*31)%3000 + 1)
					if i%150 == 7 {
						n = 3 << 20 // a huge region of its own
					}
					p, err := al.Alloc(n)
					if err != nil {
						fail("alloc: %v", err)
						return
					}
					live = append(live, p)
					if _, err := dev.LockMem(uintptr(p), min(n, 64)); err != nil {
						fail("lock inside a pinned block: %v", err)
						return
					}
					if err := dev.UnlockMem(uintptr(p)); err != nil {
						fail("unlock inside a pinned block: %v", err)
						return
					}
					if !registered(dev.Registry(), uintptr(p)) {
						fail("a pinned block is not pinned")
						return
					}
					switch i % 100 {
					case 50:
						alloc.Trim()
					case 99:
						if err := target.Shutdown(); !errors.Is(err, target.ErrBusy) {
							fail("Shutdown with a pinned block live: %v", err)
							return
						}
					}
					if len(live) > 30 {
						if err := alloc.Free(live[0]); err != nil {
							fail("free: %v", err)
							return
						}
						live = live[1:]
					}
				}
				for _, p := range live {
					if err := alloc.Free(p); err != nil {
						fail("free: %v", err)
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, base.Consistent(), "round %d, chunks cached", round)
		if round%2 == 1 {
			alloc.Trim()
			require.NoError(t, base.Consistent(), "round %d, trimmed", round)
		}
	}
	require.NoError(t, a.Destroy())
	require.NoError(t, b.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	require.NoError(t, target.Shutdown(), "nothing pinned is left: Shutdown proceeds")
	require.NoError(t, base.Check())
}

// Issue 9, item 7: under a pinned-bytes limit smaller than a chunk, the
// pinned heap locks only what the limit allows, so a 1 MiB limit serves
// about 1 MiB of small pinned blocks; VmLck, the registry and the limit
// agree all the while.
func TestSmallPinnedLimitServesWhatItAllows(t *testing.T) {
	alloc.Trim()
	base := leakcheck.Start()
	used := alloc.ReadPinnedStats().Used
	require.Zero(t, used)
	old := alloc.SetPinnedLimit(1 << 20)
	defer alloc.SetPinnedLimit(old)
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	dev, err := target.Get(target.DefaultDevice())
	require.NoError(t, err)

	var ps []unsafe.Pointer
	var served uintptr
	for {
		p, err := a.Alloc(1000)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrPinFailed)
			break
		}
		require.True(t, registered(dev.Registry(), uintptr(p)), "block %d is locked", len(ps))
		ps = append(ps, p)
		served += 1000
		require.Less(t, len(ps), 10000, "the limit is never passed")
	}
	t.Logf("a 1 MiB limit served %d blocks of 1000 bytes", len(ps))
	require.Greater(t, served, uintptr(900<<10), "about 1 MiB")
	used = alloc.ReadPinnedStats().Used
	require.LessOrEqual(t, used, uintptr(1<<20))
	require.NoError(t, base.Consistent())
	// The bytes a 1000-byte block no longer fits in still serve small
	// ones (the pages are shared first fit: issue 23), then it is full.
	for i := 0; ; i++ {
		p16, err := a.Alloc(16)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrPinFailed, "full")
			t.Logf("and %d blocks of 16 bytes", i)
			break
		}
		require.Less(t, i, 64, "a 1000-byte block would fit in that: %p", p16)
		ps = append(ps, p16)
	}

	for _, p := range ps {
		require.NoError(t, alloc.Free(p))
	}
	require.NoError(t, a.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	used = alloc.ReadPinnedStats().Used
	require.Zero(t, used)
}
