package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ompalloc/ompalloc/internal/numa"
)

// NUMAInfo is the machine's NUMA topology as the runtime read it.
type NUMAInfo struct {
	Synthetic     bool       `json:"synthetic"` // no sysfs: one node made up
	Note          string     `json:"note,omitempty"`
	Nodes         []NodeInfo `json:"nodes"`
	HugePageSizes []uint64   `json:"huge_page_sizes"` // bytes
	THP           string     `json:"thp"`             // transparent huge pages: always, madvise, never; "" unknown
	HighBw        []int      `json:"high_bw_nodes"`
	HighBwWhy     string     `json:"high_bw_why"`
	LargeCap      []int      `json:"large_cap_nodes"`
	LargeCapWhy   string     `json:"large_cap_why"`
	Policies      bool       `json:"policies"` // mbind works on this system
}

// NodeInfo is one NUMA node.
type NodeInfo struct {
	ID             int    `json:"id"`
	CPUs           string `json:"cpus"` // kernel list syntax; "" for a memory-only node
	MemoryOnly     bool   `json:"memory_only"`
	MemTotalBytes  uint64 `json:"mem_total_bytes"`
	MemFreeBytes   uint64 `json:"mem_free_bytes"`
	Distances      []int  `json:"distances"` // to the nodes in this list, in order
	Tier           int    `json:"tier"`      // kernel memory tier; -1 unknown
	ReadBandwidth  uint64 `json:"read_bandwidth_mbps"`
	ReadLatency    uint64 `json:"read_latency_ns"`
	HugePagesTotal uint64 `json:"huge_pages_total"` // persistent huge pages of every size
	Note           string `json:"note,omitempty"`
}

func gatherNUMA() NUMAInfo { return numaInfo(numa.System()) }

func numaInfo(top *numa.Topology) NUMAInfo {
	tr := top.Tiers()
	n := NUMAInfo{
		Synthetic: top.Synthetic, Note: top.Note, HugePageSizes: top.HugePageSizes, THP: top.THP,
		HighBw: tr.HighBw, HighBwWhy: tr.HighBwWhy, LargeCap: tr.LargeCap, LargeCapWhy: tr.LargeCapWhy,
		Policies: numa.Supported(), Nodes: []NodeInfo{},
	}
	if n.HugePageSizes == nil {
		n.HugePageSizes = []uint64{}
	}
	for _, nd := range top.Nodes {
		ni := NodeInfo{
			ID: nd.ID, CPUs: numa.FormatList(nd.CPUs), MemoryOnly: nd.MemoryOnly(),
			MemTotalBytes: nd.MemTotal, MemFreeBytes: nd.MemFree, Distances: nd.Distances, Tier: nd.Tier, Note: nd.Note,
		}
		if nd.Access != nil {
			ni.ReadBandwidth, ni.ReadLatency = nd.Access.ReadBandwidth, nd.Access.ReadLatency
		}
		for _, hp := range nd.HugePages {
			ni.HugePagesTotal += hp.Total
		}
		n.Nodes = append(n.Nodes, ni)
	}
	return n
}

func writeNUMA(w io.Writer, n NUMAInfo) {
	title := fmt.Sprintf("NUMA nodes (%d", len(n.Nodes))
	if n.Synthetic {
		title += ", synthetic: " + n.Note
	}
	if !n.Policies {
		title += "; memory policies not supported on this system"
	}
	fmt.Fprintf(w, "\n%s)\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tCPUS\tMEMORY\tFREE\tTIER\tHMAT READ\tDISTANCES")
	for _, nd := range n.Nodes {
		cpus := nd.CPUs
		if nd.MemoryOnly {
			cpus = "none (memory-only)"
		}
		tier, hmat := "-", "-"
		if nd.Tier >= 0 {
			tier = fmt.Sprint(nd.Tier)
		}
		if nd.ReadBandwidth > 0 || nd.ReadLatency > 0 {
			hmat = fmt.Sprintf("%d MB/s, %d ns", nd.ReadBandwidth, nd.ReadLatency)
		}
		dist := "-"
		if nd.Distances != nil {
			dist = strings.Trim(fmt.Sprint(nd.Distances), "[]")
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", nd.ID, dash(cpus), fmtBytes(int64(nd.MemTotalBytes)),
			fmtBytes(int64(nd.MemFreeBytes)), tier, hmat, dist)
	}
	tw.Flush()
	for _, nd := range n.Nodes {
		if nd.Note != "" {
			fmt.Fprintf(w, "  node %d: odd sysfs: %s\n", nd.ID, nd.Note)
		}
	}
	var sizes []string
	for _, s := range n.HugePageSizes {
		sizes = append(sizes, fmtBytes(int64(s)))
	}
	fmt.Fprintf(w, "  huge page sizes: %s; transparent huge pages: %s\n", dash(strings.Join(sizes, ", ")), dash(n.THP))
	fmt.Fprintf(w, "  high_bw: %s\n  large_cap: nodes %s: %s\n", highBwLine(n), numa.FormatList(n.LargeCap), n.LargeCapWhy)
}

func highBwLine(n NUMAInfo) string {
	if len(n.HighBw) == 0 {
		return n.HighBwWhy
	}
	return fmt.Sprintf("nodes %s: %s", numa.FormatList(n.HighBw), n.HighBwWhy)
}
