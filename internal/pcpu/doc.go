// Package pcpu gives code per-P (per logical processor) state without
// locks, the way sync.Pool does: Pin disables preemption and returns the P's
// index; until Unpin, the goroutine is the only one running on that P, so
// state indexed by it needs neither a lock nor an atomic instruction.
//
// Nothing may block between Pin and Unpin (no channel, mutex or syscall).
// That is what makes Quiesce a grace period: it returns after a
// stop-the-world, which waits for every pinned section to end.
//
// The race detector cannot see that exclusivity, so in race builds Guard
// turns into a real (never contended) spin lock that shows it the
// happens-before edges; in normal builds it compiles away.
package pcpu
