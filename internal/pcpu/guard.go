//go:build !race

package pcpu

// Guard makes per-P accesses visible to the race detector; without -race
// it does nothing and costs nothing.
type Guard struct{}

// Lock does nothing outside race builds.
func (*Guard) Lock() {}

// Unlock does nothing outside race builds.
func (*Guard) Unlock() {}

// RaceEnabled reports whether this is a -race build.
const RaceEnabled = false
