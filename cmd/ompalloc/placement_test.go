package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/numa"
)

// The transfer buffers are placed on the device's node before their pages
// are faulted in, and nodesOf reads back where the pages went: on every
// node of this machine that has memory.
func TestPlaceOnNodeAndReadBack(t *testing.T) {
	if !numa.Supported() {
		require.Contains(t, nodesOf(0, 4096), "unknown")
		t.Skip("no memory policies here (kernel without CONFIG_NUMA, or qemu-user)")
	}
	lc, err := dl.C()
	require.NoError(t, err)
	const n = 1 << 20
	for _, id := range numa.System().IDs() {
		if nd, ok := numa.System().Node(id); !ok || nd.MemTotal < 64<<20 {
			continue
		}
		p, err := lc.Map(n)
		require.NoError(t, err)
		placeOnNode(p, n, id)
		touch(p, n)
		require.Equal(t, numa.FormatList([]int{id}), nodesOf(p, n), "node %d", id)
		require.NoError(t, lc.Unmap(p, n))
	}
	p, err := lc.Map(n)
	require.NoError(t, err)
	defer func() { require.NoError(t, lc.Unmap(p, n)) }()
	require.Equal(t, "unknown: move_pages found no page", nodesOf(p, n), "never touched")
	placeOnNode(p, n, -1) // unknown node: nothing asked, no failure
	placeOnNode(p, n, 1<<12)
}
