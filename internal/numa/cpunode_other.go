//go:build !linux || !amd64

package numa

// FastNode is not available here (no per-CPU register the kernel fills
// with the node, readable without a system call): use CurrentNode.
func FastNode() (node int, ok bool) { return -1, false }
