package pcpu

import _ "unsafe" // for go:linkname

// Pin disables preemption and returns the current P's index. The runtime
// keeps procPin for linkname users (go.dev/issue/67401).
//
//go:linkname Pin runtime.procPin
func Pin() int

// Unpin re-enables preemption.
//
//go:linkname Unpin runtime.procUnpin
func Unpin()
