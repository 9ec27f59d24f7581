package reliability

// Issue 23, "Keep what held": what an adversarial session tried and found
// holding, kept as bounded tests so that it goes on holding. Each takes
// about heldDuration (a third of SOAK_DURATION, 1 s by default).

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

func heldDuration(t *testing.T) time.Duration { return max(soakDuration(t)/3, 300*time.Millisecond) }

// Destroy racing Alloc and Free at GOMAXPROCS 1 to 64 and while GOMAXPROCS
// changes, with plain, thread-locked, yielding and blocking workers, on
// plain, pooled and pinned allocators: no panic, no error but
// ErrDestroyed, the allocator made right after (which may take the old
// handle's slot) never counts the old one's blocks, and nothing is left.
func TestHeldDestroyHammer(t *testing.T) {
	base := leakcheck.Start()
	old := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	phases := []int{1, 2, 4, 8, 16, 64, 0} // 0: changing all the while
	per := heldDuration(t) / time.Duration(len(phases))
	var rounds, ops atomic.Int64
	for _, procs := range phases {
		stop := make(chan struct{})
		var flip sync.WaitGroup
		if procs == 0 {
			flip.Add(1)
			go func() {
				defer flip.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					runtime.GOMAXPROCS(1 + i%16)
					time.Sleep(200 * time.Microsecond)
				}
			}()
		} else {
			runtime.GOMAXPROCS(procs)
		}
		for end := time.Now().Add(per); time.Now().Before(end); {
			destroyRound(t, int(rounds.Load()), &ops)
			rounds.Add(1)
		}
		close(stop)
		flip.Wait()
	}
	runtime.GOMAXPROCS(old)
	t.Logf("%d rounds, %d allocations racing Destroy at GOMAXPROCS 1..64 and changing", rounds.Load(), ops.Load())
	alloc.Trim()
	require.NoError(t, base.Consistent())
}

func destroyRound(t *testing.T, round int, ops *atomic.Int64) {
	opts := [][]alloc.Option{
		nil,
		{alloc.WithPoolSize(1 << 20), alloc.WithFallback(traits.NullFb)},
		{alloc.WithPinned(true), alloc.WithFallback(traits.DefaultMemFb)},
	}[round%3]
	a, err := alloc.New(memspace.Default, opts...)
	require.NoError(t, err)
	handed := make(chan unsafe.Pointer, 64) // blocks freed by another goroutine
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch g % 4 {
			case 1:
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			for i := 0; ; i++ {
				size := uintptr(16 << (i % 12)) // 16 B to 32 KiB
				p, err := a.Alloc(size)
				if err != nil {
					if !errors.Is(err, alloc.ErrDestroyed) && !errors.Is(err, alloc.ErrPoolExhausted) {
						t.Errorf("alloc: %v", err)
					}
					if errors.Is(err, alloc.ErrDestroyed) {
						return
					}
					continue
				}
				ops.Add(1)
				b := cmem.Bytes(uintptr(p), size)
				b[0], b[size-1] = byte(g), byte(i)
				switch g % 4 {
				case 2:
					runtime.Gosched()
				case 3:
					time.Sleep(time.Microsecond) // blocks: the P is handed off
				}
				if b[0] != byte(g) || b[size-1] != byte(i) {
					t.Errorf("block %p changed under its owner", p)
				}
				select {
				case handed <- p: // someone else frees it
				default:
					if err := alloc.Free(p); err != nil {
						t.Errorf("free: %v", err)
						return
					}
				}
				select {
				case q := <-handed:
					if err := alloc.Free(q); err != nil {
						t.Errorf("free of a handed block: %v", err)
						return
					}
				default:
				}
			}
		}()
	}
	runtime.Gosched()
	if err := a.Destroy(); err != nil {
		require.ErrorIs(t, err, alloc.ErrLiveBlocks)
	}
	b, err := alloc.New(memspace.Default, opts...)
	require.NoError(t, err)
	wg.Wait()
	close(handed)
	for q := range handed {
		require.NoError(t, alloc.Free(q))
	}
	st := b.Stats()
	require.Zero(t, st.BlocksLive, "round %d: the new allocator counts the old one's blocks: %+v", round, st)
	require.Zero(t, st.Allocs)
	require.Zero(t, st.PoolUsed)
	sa := a.Stats()
	require.Zero(t, sa.BlocksLive, "round %d: the destroyed allocator: %+v", round, sa)
	require.Zero(t, sa.PoolUsed)
	require.NoError(t, b.Destroy())
}

// fork and exec while pinned pools hold live, locked blocks and other
// goroutines allocate, lock and free: the children run, the parent's
// blocks keep their bytes, and VmLck, the registries and Stats agree.
func TestHeldForkExecWithLivePinnedPools(t *testing.T) {
	base := leakcheck.Start()
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()); alloc.Trim() })
	var live []unsafe.Pointer
	for i := range 64 {
		p, err := a.Alloc(uintptr(1000 + i*4096))
		require.NoError(t, err)
		pattern(cmem.Bytes(uintptr(p), uintptr(1000+i*4096)), byte(i))
		live = append(live, p)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churn atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := uintptr(64 + (i%64)*512)
				p, err := a.Alloc(n)
				if err != nil {
					t.Errorf("pinned alloc during fork/exec: %v", err)
					return
				}
				pattern(cmem.Bytes(uintptr(p), n), byte(g))
				if !holds(cmem.Bytes(uintptr(p), n), byte(g)) {
					t.Errorf("pinned block changed")
				}
				if err := alloc.Free(p); err != nil {
					t.Errorf("free: %v", err)
					return
				}
				churn.Add(1)
			}
		}()
	}
	children := 0
	for end := time.Now().Add(heldDuration(t)); time.Now().Before(end); children++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = childEnviron()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child %d: %s", children, out)
	}
	close(stop)
	wg.Wait()
	for i, p := range live {
		require.True(t, holds(cmem.Bytes(uintptr(p), uintptr(1000+i*4096)), byte(i)), "block %d", i)
		require.NoError(t, alloc.Free(p))
	}
	t.Logf("%d fork/exec children while %d pinned blocks were live and %d more came and went", children, len(live), churn.Load())
	require.Positive(t, children)
	require.NoError(t, base.Consistent())
}
