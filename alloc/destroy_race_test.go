package alloc

import (
	"errors"
	"github.com/ompalloc/ompalloc/internal/handles"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memspace"
)

// Issue 9, item 9: Destroy racing Alloc on the same allocator (a misuse)
// must not hand the handle to a new allocator while an Alloc on the old
// one can still run: the allocator that reuses the handle never counts the
// old one's blocks.
func TestDestroyRacingAlloc(t *testing.T) {
	rounds := 2000
	if testing.Short() || !testenv.LongTests() {
		rounds = 200 // 2000 in the long run (testenv.LongEnv)
	}
	bad := 0
	for round := 0; round < rounds && bad == 0; round++ {
		a, err := New(memspace.Default)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					p, err := a.Alloc(64)
					if err != nil {
						if !errors.Is(err, ErrDestroyed) {
							t.Errorf("alloc: %v", err)
						}
						return
					}
					if i%4 == 0 {
						runtime.Gosched()
					}
					if err := Free(p); err != nil {
						t.Errorf("free: %v", err)
						return
					}
				}
			}()
		}
		runtime.Gosched()
		if err := a.Destroy(); err != nil {
			require.ErrorIs(t, err, ErrLiveBlocks) // the frees release it
		}
		b, err := New(memspace.Default) // may take a's handle
		require.NoError(t, err)
		wg.Wait()
		if st := b.Stats(); st.BlocksLive != 0 || st.Allocs != 0 || st.Frees != 0 {
			t.Errorf("round %d: %v (handle %d, old %d) counts the old allocator's blocks: %+v", round, b, b.handle(), a.handle(), st)
			bad++
		}
		require.NoError(t, b.Destroy())
	}
}

// setReuseDelay makes freed handle numbers reusable after d others wait,
// for the test (0: at once, as before issue 23, so that the races below
// meet a reused number).
// The numbers already waiting are set aside meanwhile, so that the next
// number freed is the next reused.
func setReuseDelay(t *testing.T, d int) {
	tableMu.Lock()
	saved, savedFree := reuseDelay, freeIDs
	reuseDelay, freeIDs = d, nil
	tableMu.Unlock()
	t.Cleanup(func() {
		tableMu.Lock()
		reuseDelay, freeIDs = saved, append(savedFree, freeIDs...)
		tableMu.Unlock()
	})
}

// Issue 23 item 4: Destroy with live blocks, the blocks freed from two
// goroutines, a new allocator: legal use. The free of the one block looked
// the owner up by number after heap.Free had counted it out; the free of
// the other could release the destroyed allocator in between and its
// number go to the new allocator, which the late free then credited
// (PoolUsed -268,435,472 on a fresh allocator with pool_size 1 MiB, which
// then served 64 MiB). freedHook holds the first free in that window until
// the new allocator has the number; its counts must stay untouched.
func TestFreeOfDestroyedRacesHandleReuse(t *testing.T) {
	setReuseDelay(t, 0)
	const pool = 1 << 20
	for round := 0; round < 20; round++ {
		a, err := New(memspace.Default, WithPoolSize(pool))
		require.NoError(t, err)
		p1, err := a.Alloc(256 << 10)
		require.NoError(t, err)
		p2, err := a.Alloc(256 << 10)
		require.NoError(t, err)
		require.ErrorIs(t, a.Destroy(), ErrLiveBlocks)

		var held atomic.Int32
		resume := make(chan struct{})
		freedHook = func() {
			if held.Add(1) == 1 { // the first free waits in the window
				select {
				case <-resume:
				case <-time.After(5 * time.Second):
				}
			}
		}
		t.Cleanup(func() { freedHook = nil })
		var wg sync.WaitGroup
		for _, p := range []unsafe.Pointer{p1, p2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := Free(p); err != nil {
					t.Errorf("free: %v", err)
				}
			}()
		}
		// The second free releases a; then a new allocator takes its number.
		for deadline := time.Now().Add(5 * time.Second); owner(a.id) == a; {
			require.True(t, time.Now().Before(deadline), "a was never released")
			time.Sleep(100 * time.Microsecond)
		}
		b, err := New(memspace.Default, WithPoolSize(pool))
		require.NoError(t, err)
		require.Equal(t, a.id, b.id, "b has a's number")
		close(resume)
		wg.Wait()
		freedHook = nil
		st := b.Stats()
		require.Zero(t, st.PoolUsed, "round %d: %v (old %v) was credited the old allocator's free: %+v", round, b, a, st)
		require.Zero(t, st.Frees)
		require.NoError(t, b.Destroy())
	}
}

// Issue 23 item 4: a handle kept past Destroy names no allocator, even
// once its number is reused: the new allocator's handle has a new
// generation.
func TestStaleHandleRefused(t *testing.T) {
	setReuseDelay(t, 0)
	a, err := New(memspace.Default)
	require.NoError(t, err)
	stale := a.handle()
	require.NoError(t, a.Destroy())
	b, err := New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Destroy() })
	require.Equal(t, a.id, b.id, "the number is reused at once with no delay")
	require.NotEqual(t, stale, b.handle(), "a reused number gets a new generation")
	require.Nil(t, handles.Live(uintptr(stale)), "kmp's inlined lookup")
	require.Same(t, b, allocatorAt(handles.Live(uintptr(b.handle()))))
	_, ok := lookup(stale)
	require.False(t, ok, "the stale handle %d names no allocator", stale)
	got, ok := lookup(b.handle())
	require.True(t, ok)
	require.Same(t, b, got)
	require.Equal(t, "allocator#"+strconv.FormatUint(uint64(stale), 10), stale.String())

	// With the default delay a number waits: the next allocator gets another.
	setReuseDelay(t, 256)
	c, err := New(memspace.Default)
	require.NoError(t, err)
	require.NoError(t, c.Destroy())
	d, err := New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Destroy() })
	require.NotEqual(t, c.id, d.id, "a freed number is not reused at once")
}

// Issue 30: the hot path (heap.AllocEntry) stores no in-flight mark; it
// reads the destroyed flag in its pinned section, and Destroy waits out a
// grace period (pcpu.Quiesce) before it reads the live count. Destroy
// racing cached-block allocations at GOMAXPROCS 1 to 64, with the number
// reused at once: the allocator that takes the number never counts the old
// one's blocks (an allocation that passed the flag's check and counted its
// block after Destroy's read would leave a live block that Destroy did not
// see, whose free then counts out of the new allocator).
func TestDestroyRacingFastAlloc(t *testing.T) {
	setReuseDelay(t, 0)
	old := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	for _, procs := range []int{1, 2, 4, 8, 16, 64} {
		runtime.GOMAXPROCS(procs)
		for round := 0; round < rounds && !t.Failed(); round++ {
			a, err := New(memspace.Default)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var started sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				started.Add(1)
				go func() {
					defer wg.Done()
					var held [8]unsafe.Pointer // blocks kept a while: Destroy sees some live
					for i := 0; ; i++ {
						if i == 8 {
							started.Done()
						}
						p, err := a.Alloc(64)
						if err != nil {
							if !errors.Is(err, ErrDestroyed) {
								t.Errorf("alloc: %v", err)
							}
							for _, q := range held {
								if q != nil {
									require.NoError(t, Free(q))
								}
							}
							if i < 8 {
								started.Done()
							}
							return
						}
						if q := held[i%8]; q != nil {
							if err := Free(q); err != nil {
								t.Errorf("free: %v", err)
							}
						}
						held[i%8] = p
					}
				}()
			}
			started.Wait()
			if err := a.Destroy(); err != nil {
				require.ErrorIs(t, err, ErrLiveBlocks) // the frees release it
			}
			b, err := New(memspace.Default) // takes a's number once a is released
			require.NoError(t, err)
			wg.Wait()
			st := b.Stats()
			require.True(t, st.Frees == 0 && st.Allocs == 0, "GOMAXPROCS %d round %d: %v (old %v) counts the old allocator's blocks: %+v", procs, round, b, a, st)
			require.NoError(t, b.Destroy())
		}
	}
}
