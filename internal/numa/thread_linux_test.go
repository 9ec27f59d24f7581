//go:build linux && (amd64 || arm64)

package numa_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/numa"
)

// A thread policy places the pages the thread faults in, and restore puts
// the old policy back: a page faulted afterwards follows the default again.
func TestSetThreadPolicy(t *testing.T) {
	if !numa.Supported() {
		t.Skip("no memory policies here (kernel without CONFIG_NUMA, or qemu-user)")
	}
	ids := numa.System().IDs()
	node := ids[len(ids)-1] // the last node: on a multi-node machine, not always the local one
	if n, ok := numa.System().Node(node); !ok || n.MemTotal == 0 {
		t.Skipf("node %d has no memory", node)
	}
	lc, err := dl.C()
	require.NoError(t, err)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	mode0, nodes0, err := numa.ThreadPolicy()
	require.NoError(t, err)
	restore, err := numa.SetThreadPolicy(numa.ModeBind, []int{node})
	require.NoError(t, err)
	mode, nodes, err := numa.ThreadPolicy()
	require.NoError(t, err)
	require.Equal(t, numa.ModeBind, mode)
	require.Equal(t, []int{node}, nodes)
	p, err := lc.Map(4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, lc.Unmap(p, 4096)) }()
	cmem.Bytes(p, 1)[0] = 1 // faulted in under the thread's policy
	got, err := numa.PageNodes([]uintptr{p})
	require.NoError(t, err)
	require.Equal(t, []int{node}, got)
	require.NoError(t, restore())
	mode, nodes, err = numa.ThreadPolicy()
	require.NoError(t, err)
	require.Equal(t, mode0, mode, "restored")
	require.Equal(t, nodes0, nodes)

	_, err = numa.SetThreadPolicy(numa.ModeBind, []int{1 << 12})
	require.ErrorIs(t, err, numa.ErrPolicy, "a node that does not exist")
}
