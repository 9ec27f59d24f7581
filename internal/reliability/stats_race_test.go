package reliability

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
)

// Stats may be read while other goroutines allocate, in every build. Under
// the race detector the per-P guards are real spin locks; this runs the
// mix in a child so that a crash of the runtime shows as a failure rather
// than killing the test binary.
func TestStatsWhileAllocating(t *testing.T) {
	runChild(t, "TestStatsWhileAllocatingChild")
}

func TestStatsWhileAllocatingChild(t *testing.T) {
	inChild(t)
	a := alloc.Default()
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				p, err := a.Alloc(64)
				if err != nil {
					panic(err)
				}
				_ = alloc.Free(p)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			_ = a.Stats()
			_ = alloc.LiveBlocks()
		}
	}()
	wg.Wait()
	require.Zero(t, a.Stats().BlocksLive)
}
