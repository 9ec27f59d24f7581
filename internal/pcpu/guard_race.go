//go:build race

package pcpu

import "sync/atomic"

// Guard makes per-P accesses visible to the race detector as locked ones.
// Hold it only while pinned (between Pin and Unpin): a holder then runs
// until it lets go, so Lock may spin without yielding — and must, since a
// pinned goroutine cannot be descheduled.
type Guard struct{ held atomic.Uint32 }

// Lock acquires the guard.
func (g *Guard) Lock() {
	for !g.held.CompareAndSwap(0, 1) {
	}
}

// Unlock releases it.
func (g *Guard) Unlock() { g.held.Store(0) }

// RaceEnabled reports whether this is a -race build.
const RaceEnabled = true
