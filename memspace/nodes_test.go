package memspace

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

func fixture(t *testing.T, name string) *numa.Topology {
	t.Helper()
	top := numa.Read("../internal/numa/testdata/" + name)
	old := topology
	topology = func() *numa.Topology { return top }
	t.Cleanup(func() { topology = old })
	return top
}

func TestPlacementOnFixtures(t *testing.T) {
	type want struct {
		nodes      []int
		restricted bool
		backedBy   ID
		memory     string
	}
	cases := map[string]map[ID]want{
		"single": {
			Default:  {[]int{0}, false, Default, "host memory"},
			HighBw:   {[]int{0}, false, Default, "default host memory (no high-bandwidth"},
			LargeCap: {[]int{0}, false, Default, "default host memory (no large-capacity"},
			LowLat:   {[]int{0}, false, Default, "default host memory"},
		},
		"two-socket": {
			Default:  {[]int{0, 1}, false, Default, "host memory"},
			HighBw:   {[]int{0, 1}, false, Default, "default host memory"},
			LargeCap: {[]int{0, 1}, false, Default, "default host memory"},
		},
		"xeon-max-flat": {
			Default:  {[]int{0, 1, 2, 3}, false, Default, "host memory"},
			HighBw:   {[]int{2, 3}, true, HighBw, "high-bandwidth memory on NUMA nodes 2-3"},
			LargeCap: {[]int{0, 1, 2, 3}, false, Default, "default host memory"},
		},
		"cxl": {
			Default:  {[]int{0, 1}, false, Default, "host memory"},
			HighBw:   {[]int{0, 1}, false, Default, "default host memory"},
			LargeCap: {[]int{1}, true, LargeCap, "capacity memory on NUMA nodes 1"},
		},
		"qemu-hmat": {
			Default:  {[]int{0, 1, 2, 3}, false, Default, "host memory"},
			HighBw:   {[]int{2}, true, HighBw, "high-bandwidth memory on NUMA nodes 2"},
			LargeCap: {[]int{3}, true, LargeCap, "capacity memory on NUMA nodes 3"},
		},
		"qemu-tiers": {
			Default:  {[]int{0, 1, 2, 3}, false, Default, "host memory"},
			HighBw:   {[]int{0, 1, 2, 3}, false, Default, "default host memory"},
			LargeCap: {[]int{3}, true, LargeCap, "capacity memory on NUMA nodes 3"},
		},
		"none": {
			Default: {[]int{0}, false, Default, "host memory"},
			HighBw:  {[]int{0}, false, Default, "default host memory"},
		},
	}
	for name, ms := range cases {
		t.Run(name, func(t *testing.T) {
			fixture(t, name)
			for id, w := range ms {
				nodes, restricted, why := Placement(id)
				require.Equal(t, w.nodes, nodes, "%v", id)
				require.Equal(t, w.restricted, restricted, "%v", id)
				require.NotEmpty(t, why)
				b := Describe(id)
				require.Equal(t, w.backedBy, b.BackedBy, "%v", id)
				require.Contains(t, b.Memory, w.memory, "%v", id)
				require.Equal(t, w.nodes, b.Nodes)
			}
			nodes, _, why := Placement(TargetDevice)
			require.Nil(t, nodes)
			require.Empty(t, why)
		})
	}
}

func TestOnNodes(t *testing.T) {
	fixture(t, "xeon-max-flat")
	sub, err := OnNodes(HighBw, []int{3})
	require.NoError(t, err)
	require.True(t, sub.runtimeRange())
	again, err := OnNodes(HighBw, []int{3, 3})
	require.NoError(t, err)
	require.Equal(t, sub, again)
	nodes, restricted, why := Placement(sub)
	require.Equal(t, []int{3}, nodes)
	require.True(t, restricted)
	require.Contains(t, why, "sub-memory space of omp_high_bw_mem_space")
	b := Describe(sub)
	require.Equal(t, "host", b.Kind)
	require.Equal(t, HighBw, b.BackedBy)
	require.Equal(t, "omp_high_bw_mem_space memory on NUMA nodes 3", b.Memory)

	whole, err := OnNodes(HighBw, []int{3, 2})
	require.NoError(t, err)
	require.Equal(t, HighBw, whole, "every node of it is the memory space itself")

	d, err := OnNodes(Default, []int{1})
	require.NoError(t, err)
	require.NotEqual(t, sub, d)

	_, err = OnNodes(HighBw, []int{0})
	require.ErrorContains(t, err, "node 0 does not back omp_high_bw_mem_space (nodes 2-3)")
	_, err = OnNodes(HighBw, nil)
	require.ErrorContains(t, err, "at least one node")
	_, err = OnNodes(TargetHost, []int{0})
	require.ErrorContains(t, err, "not a predefined host memory space")
	_, err = OnNodes(ID(77), []int{0})
	require.ErrorContains(t, err, "not a predefined host memory space")
}
