package pcpu

import (
	"runtime"
	_ "unsafe" // for go:linkname
)

// Pin disables preemption and returns the current P's index. The runtime
// keeps procPin for linkname users (go.dev/issue/67401).
//
//go:linkname Pin runtime.procPin
func Pin() int

// Unpin re-enables preemption.
//
//go:linkname Unpin runtime.procUnpin
func Unpin()

// Quiesce returns after a stop-the-world that began after it was called:
// the world stops only once no goroutine is pinned (a pinned goroutine
// cannot be preempted), so every goroutine pinned when Quiesce was called
// has unpinned by the time it returns, and each P stopped through the
// runtime's own synchronisation, so what they stored before is visible to
// the caller after. It is the grace period of RCU for Pin's sections:
// memory they might still read can be freed once it returns.
// runtime.ReadMemStats stops the world without collecting (tens of µs,
// not a GC cycle, and no more with a large Go heap).
func Quiesce() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
}
