package memspace

import (
	"fmt"
	"slices"

	"github.com/ompalloc/ompalloc/internal/numa"
)

// topology is the machine's; tests put fixtures in its place.
var topology = numa.System

// Placement returns the NUMA nodes whose memory backs a host memory space
// on this machine, whether they are a restriction (fewer than every node
// with memory: HBM, CXL, a sub-memory space), which an allocator must
// enforce with a memory policy, and why those nodes: every node with memory
// for the default memory space (and low_lat and const, which have no memory
// of their own), the high-bandwidth nodes for high_bw and the capacity
// nodes for large_cap when the machine has such nodes (else every node, as
// default memory), the chosen nodes for a sub-memory space. Target memory
// spaces and unknown handles have none.
func Placement(id ID) (nodes []int, restricted bool, why string) {
	return placement(id, topology())
}

func placement(id ID, top *numa.Topology) ([]int, bool, string) {
	tr := top.Tiers()
	restricted := func(n []int) bool { return !slices.Equal(n, tr.Default) }
	switch id {
	case Default:
		return tr.Default, false, "every node with memory"
	case LowLat, Const:
		return tr.Default, false, "no memory of its own: every node with memory, as default"
	case HighBw:
		if len(tr.HighBw) > 0 {
			return tr.HighBw, restricted(tr.HighBw), tr.HighBwWhy
		}
		return tr.Default, false, tr.HighBwWhy
	case LargeCap:
		return tr.LargeCap, restricted(tr.LargeCap), tr.LargeCapWhy
	}
	if d, ok := DevicesOf(id); ok && d.Nodes != nil {
		return d.Nodes, restricted(d.Nodes), fmt.Sprintf("sub-memory space of %v: nodes %s", d.Base, numa.FormatList(d.Nodes))
	}
	return nil, false, ""
}

// OnNodes returns the memory space of base's memory restricted to the given
// NUMA nodes (omp_get_submemspace of a host memory space). Identical
// requests give the same handle. base must be a predefined host memory
// space; the nodes must be among those that back it.
func OnNodes(base ID, nodes []int) (ID, error) {
	if !base.predefinedSpace() || base.IsTarget() {
		return Null, fmt.Errorf("memory space %v is not a predefined host memory space", base)
	}
	ns := slices.Clone(nodes)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	if len(ns) == 0 {
		return Null, fmt.Errorf("a sub-memory space of %v needs at least one node", base)
	}
	all, _, _ := placement(base, topology())
	for _, n := range ns {
		if !slices.Contains(all, n) {
			return Null, fmt.Errorf("node %d does not back %v (nodes %s)", n, base, numa.FormatList(all))
		}
	}
	if slices.Equal(ns, all) {
		return base, nil
	}
	return register(Devices{Base: base, Host: true, Nodes: ns}), nil
}
