//go:build race

package pcpu

import (
	"runtime"
	"sync/atomic"
)

// Guard makes per-P accesses visible to the race detector as locked ones.
type Guard struct{ held atomic.Uint32 }

// Lock acquires the guard.
func (g *Guard) Lock() {
	for !g.held.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
}

// Unlock releases it.
func (g *Guard) Unlock() { g.held.Store(0) }

// RaceEnabled reports whether this is a -race build.
const RaceEnabled = true
