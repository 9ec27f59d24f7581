package pcpu

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Quiesce is the heap's grace period before a chunk is unmapped (a stale
// free reads its headers pinned): it must not return while a goroutine
// that was pinned when it was called is still pinned.
func TestQuiesceWaitsForPinnedSections(t *testing.T) {
	var pinned, left atomic.Bool
	go func() {
		Pin()
		pinned.Store(true)
		for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		}
		left.Store(true)
		Unpin()
	}()
	for !pinned.Load() {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	Quiesce()
	require.True(t, left.Load(), "Quiesce returned while a goroutine pinned before it was still pinned")
	t.Logf("waited %v", time.Since(start))
}

func BenchmarkQuiesce(b *testing.B) {
	for b.Loop() {
		Quiesce()
	}
}
