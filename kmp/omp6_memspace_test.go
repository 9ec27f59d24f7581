package kmp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
)

// TestHostMemspaceResourcesAreNodes: the resources of a host memory space
// are the NUMA nodes backing it; a sub-memory space of some of them is
// bound to them; a sub-memory space of all of them is the memory space.
func TestHostMemspaceResourcesAreNodes(t *testing.T) {
	nodes := numa.System().Tiers().Default
	for _, ms := range []MemspaceHandle{DefaultMemSpace, LargeCapMemSpace, HighBwMemSpace, LowLatMemSpace} {
		want, _, _ := memspace.Placement(memspace.ID(ms))
		require.Equal(t, len(want), GetMemspaceNumResources(ms), "%#x", uintptr(ms))
	}
	require.Equal(t, 1, GetMemspaceNumResources(MemspaceHandle(memspace.TargetDevice)))

	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	require.Equal(t, DefaultMemSpace, GetSubmemspace(DefaultMemSpace, all))
	if len(nodes) > 1 {
		sub := GetSubmemspace(DefaultMemSpace, []int{1})
		require.NotEqual(t, NullMemSpace, sub)
		require.Equal(t, 1, GetMemspaceNumResources(sub))
		got, _, _ := memspace.Placement(memspace.ID(sub))
		require.Equal(t, []int{nodes[1]}, got)
		require.Equal(t, sub, GetSubmemspace(sub, []int{0}))
	}
	var got MemspaceHandle
	w := captureWarnings(t, func() { got = GetSubmemspace(DefaultMemSpace, []int{len(nodes)}) })
	require.Equal(t, NullMemSpace, got)
	require.Contains(t, w, "out of range")
	require.Contains(t, w, "omp_default_mem_space")
}
