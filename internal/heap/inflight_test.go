package heap

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTallyEnterExit(t *testing.T) {
	tl := NewTally()
	var closed atomic.Bool
	require.True(t, tl.Enter(&closed))
	require.True(t, tl.Enter(&closed))
	require.EqualValues(t, 2, tl.InFlight())
	done := make(chan struct{})
	go func() { tl.Exit(); close(done) }() // may end on another P
	<-done
	require.EqualValues(t, 1, tl.InFlight())
	closed.Store(true)
	require.False(t, tl.Enter(&closed), "Enter after close")
	require.EqualValues(t, 1, tl.InFlight(), "a refused Enter takes its count back")
	tl.Exit()
	require.EqualValues(t, 0, tl.InFlight())
	require.Zero(t, tl.Sum().Live(), "in-flight counts are not blocks")
}

// Once the closer has set the flag and read a zero sum, no operation that
// Enter let in is still running, however the goroutines migrate.
func TestTallyCloseWaitsForInFlight(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for r := 0; r < rounds; r++ {
		tl := NewTally()
		var closed atomic.Bool
		var inside atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; tl.Enter(&closed); i++ {
					inside.Add(1)
					if i%3 == 0 {
						runtime.Gosched() // migrate between Enter and Exit
					}
					inside.Add(-1)
					tl.Exit()
				}
			}()
		}
		runtime.Gosched()
		closed.Store(true)
		for tl.InFlight() != 0 {
			runtime.Gosched()
		}
		require.Zero(t, inside.Load(), "round %d: an operation still runs after the wait", r)
		wg.Wait()
		require.Zero(t, tl.InFlight())
	}
}
