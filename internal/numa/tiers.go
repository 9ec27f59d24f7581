package numa

import (
	"fmt"
	"slices"
)

// Tiers says which nodes back the host memory spaces, and why.
type Tiers struct {
	Default     []int  `json:"default"` // every node with memory (or every node when none reports its size)
	HighBw      []int  `json:"high_bw"` // nil: none, high_bw falls back to Default
	HighBwWhy   string `json:"high_bw_why"`
	LargeCap    []int  `json:"large_cap"` // capacity nodes, or Default when there are none
	LargeCapWhy string `json:"large_cap_why"`
}

// Tiers classifies the nodes. A node is high-bandwidth when it is
// memory-only and its HMAT read bandwidth exceeds that of every node with
// CPUs, or (without HMAT figures) its memory tier is faster than theirs. It
// is capacity memory when it is memory-only, not high-bandwidth, and slower
// than the CPU nodes by HMAT bandwidth or memory tier. Nodes without memory
// (placeholders, as a GH200 has for GPU partitions) take no part.
func (t *Topology) Tiers() Tiers {
	var r Tiers
	var cpuNodes, memOnly []*Node
	for i := range t.Nodes {
		n := &t.Nodes[i]
		switch {
		case n.MemoryOnly():
			memOnly = append(memOnly, n)
			r.Default = append(r.Default, n.ID)
		case len(n.CPUs) > 0 && n.MemTotal > 0:
			cpuNodes = append(cpuNodes, n)
			r.Default = append(r.Default, n.ID)
		}
	}
	if len(r.Default) == 0 {
		r.Default = t.IDs()
	}
	if len(cpuNodes) == 0 || len(memOnly) == 0 {
		r.HighBwWhy = "no memory-only node: default memory"
		r.LargeCap = r.Default
		r.LargeCapWhy = "no memory-only node: all nodes"
		return r
	}
	var cpuBW, cpuBWMin uint64 = 0, ^uint64(0)
	cpuTierMin, cpuTierMax := int(^uint(0)>>1), -1
	bwKnown, tierKnown := true, true
	for _, n := range cpuNodes {
		if n.Access == nil || n.Access.ReadBandwidth == 0 {
			bwKnown = false
		} else {
			cpuBW = max(cpuBW, n.Access.ReadBandwidth)
			cpuBWMin = min(cpuBWMin, n.Access.ReadBandwidth)
		}
		if n.Tier < 0 {
			tierKnown = false
		} else {
			cpuTierMin, cpuTierMax = min(cpuTierMin, n.Tier), max(cpuTierMax, n.Tier)
		}
	}
	var hbmWhy, capWhy []string
	for _, n := range memOnly {
		bw := uint64(0)
		if n.Access != nil {
			bw = n.Access.ReadBandwidth
		}
		switch {
		case bwKnown && bw > cpuBW:
			r.HighBw = append(r.HighBw, n.ID)
			hbmWhy = append(hbmWhy, fmt.Sprintf("node %d: HMAT read bandwidth %d MB/s > %d MB/s of the CPU nodes", n.ID, bw, cpuBW))
		case bwKnown && bw > 0 && bw < cpuBWMin:
			r.LargeCap = append(r.LargeCap, n.ID)
			capWhy = append(capWhy, fmt.Sprintf("node %d: memory-only, HMAT read bandwidth %d MB/s < %d MB/s of the CPU nodes", n.ID, bw, cpuBWMin))
		case (!bwKnown || bw == 0) && tierKnown && n.Tier >= 0 && n.Tier < cpuTierMin:
			r.HighBw = append(r.HighBw, n.ID)
			hbmWhy = append(hbmWhy, fmt.Sprintf("node %d: memory tier %d, faster than the CPU nodes' tier %d", n.ID, n.Tier, cpuTierMin))
		case (!bwKnown || bw == 0) && tierKnown && n.Tier > cpuTierMax:
			r.LargeCap = append(r.LargeCap, n.ID)
			capWhy = append(capWhy, fmt.Sprintf("node %d: memory-only, memory tier %d, slower than the CPU nodes' tier %d", n.ID, n.Tier, cpuTierMax))
		}
	}
	if len(r.HighBw) > 0 {
		r.HighBwWhy = join(hbmWhy)
	} else {
		r.HighBwWhy = "no node has more bandwidth than the CPU nodes' memory (by HMAT or memory tier): default memory"
	}
	if len(r.LargeCap) > 0 {
		r.LargeCapWhy = join(capWhy)
	} else {
		r.LargeCap = r.Default
		r.LargeCapWhy = "no capacity-tier node (by HMAT or memory tier): all nodes"
	}
	slices.Sort(r.HighBw)
	slices.Sort(r.LargeCap)
	return r
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}
