package main

import (
	"strings"
	"testing"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/stretchr/testify/require"
)

// Each device reports the nodes its pinned pool is split by, as the runtime
// says for this machine; info pins nothing, so no pool exists in it. The
// default device's answer is checked against the pool a pinned allocator
// of this process makes there.
func TestInfoPinnedPoolNodes(t *testing.T) {
	rep, _ := infoJSON(t)
	r := ompalloc(t, nil, "info")
	require.Equal(t, 0, r.code, r.stderr)

	livePinnedBlock(t)
	made, ok := ownPinnedPool(target.DefaultDevice())
	require.True(t, ok)
	split := []int{}
	if len(made.Nodes) > 1 {
		for _, n := range made.Nodes {
			split = append(split, n.Node)
		}
	}

	checked := false
	for _, d := range rep.Devices {
		want := []int{}
		if dev, err := device.Get(d.Number); err == nil {
			want = append(want, numa.System().PoolNodes(dev.Info().NUMANode)...)
		}
		if d.Number == target.DefaultDevice() {
			want, checked = split, true
		}
		require.Equal(t, want, d.PinnedPool.Nodes, "device %d", d.Number)
		require.Empty(t, d.PinnedPool.Heaps, "device %d: info made no pool", d.Number)
		for _, l := range poolLines(d) {
			require.Contains(t, r.stdout, l)
		}
		require.Equal(t, len(want) > 0, strings.Contains(r.stdout, "pinned pool: a heap per NUMA node"),
			"the text shows a split pool, and only that")
	}
	require.True(t, checked, "info lists the default device")
}

// livePinnedBlock makes the default device's pinned pool exist for the
// test: a pinned allocator with one live block, both gone at cleanup.
func livePinnedBlock(t *testing.T) {
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Destroy()) })
	p, err := a.Alloc(1000)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, alloc.Free(p)) })
}

// poolInfo agrees with the pool a pinned allocator made, heap by heap.
func TestInfoPoolInfo(t *testing.T) {
	livePinnedBlock(t)

	dev := target.DefaultDevice() // where a pinned allocator pins by default
	st, ok := ownPinnedPool(dev)
	require.True(t, ok)
	got := poolInfo(dev)
	require.Len(t, got.Heaps, len(st.Nodes))
	require.Equal(t, st.FarAllocs, got.FarAllocs)
	for i, n := range st.Nodes {
		h := got.Heaps[i]
		require.Equal(t, n.Node, h.Node)
		require.Equal(t, uint64(n.Locked), h.LockedBytes)
		require.Equal(t, n.Chunks, h.Chunks)
		require.Equal(t, n.FarAllocs, h.FarAllocs)
	}
	// The block's chunk is locked, in the heap of whichever node the
	// caller ran on.
	var locked uint64
	for _, h := range got.Heaps {
		locked += h.LockedBytes
	}
	require.NotZero(t, locked, "the block's chunk is locked")
	if len(got.Nodes) == 0 { // one heap: the device's node
		require.Len(t, got.Heaps, 1)
		require.Equal(t, -1, got.Heaps[0].Node)
		require.Nil(t, poolLines(DeviceInfo{Number: dev, PinnedPool: got}))
	}
}

func TestPoolLines(t *testing.T) {
	split := PoolInfo{Nodes: []int{0, 1}, FarAllocs: 3, Heaps: []PoolHeapInfo{
		{Node: 0, LockedBytes: 8 << 20, IdleBytes: 4 << 20, Chunks: 2, FarAllocs: 0},
		{Node: 1, LockedBytes: 4 << 20, Chunks: 1, Huge: 2, FarAllocs: 3},
	}}
	tests := []struct {
		name string
		pool PoolInfo
		want []string
	}{
		{"one heap", PoolInfo{Nodes: []int{}, Heaps: []PoolHeapInfo{{Node: -1, LockedBytes: 4 << 20}}}, nil},
		{"split, not made", PoolInfo{Nodes: []int{0, 1}, Heaps: []PoolHeapInfo{}}, []string{
			"  device 2 pinned pool: a heap per NUMA node 0-1 (callers use their node's; another's only when it has no memory)",
			"    not made yet (no pinned allocation in this process)",
		}},
		{"split", split, []string{
			"  device 2 pinned pool: a heap per NUMA node 0-1 (callers use their node's; another's only when it has no memory)",
			"    node 0: 8 MiB locked, 4 MiB idle, 2 chunks, 0 huge, 0 far allocs",
			"    node 1: 4 MiB locked, 0 B idle, 1 chunks, 2 huge, 3 far allocs",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, poolLines(DeviceInfo{Number: 2, PinnedPool: tc.pool}))
		})
	}
}
