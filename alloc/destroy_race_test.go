package alloc

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
)

// Issue 9, item 9: Destroy racing Alloc on the same allocator (a misuse)
// must not hand the handle to a new allocator while an Alloc on the old
// one can still run: the allocator that reuses the handle never counts the
// old one's blocks.
func TestDestroyRacingAlloc(t *testing.T) {
	rounds := 2000
	if testing.Short() {
		rounds = 200
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
			t.Errorf("round %d: %v (handle %d, old %d) counts the old allocator's blocks: %+v", round, b, b.Handle(), a.Handle(), st)
			bad++
		}
		require.NoError(t, b.Destroy())
	}
}
