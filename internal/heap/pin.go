package heap

import _ "unsafe" // for go:linkname

// procPin disables preemption and returns the current P's id; procUnpin
// re-enables it. While pinned, the goroutine owns its P's cache without a
// lock, as sync.Pool does. The runtime keeps both for linkname users
// (go.dev/issue/67401). Nothing may block between the two calls.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
