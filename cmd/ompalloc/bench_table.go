package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// groupInfo says how a group is shown: its title, what its x axis is, and
// whether its cells are bandwidths.
type groupInfo struct {
	name, title string
	byRegions   bool
	byCount     string // the x axis is the goroutine count; its head
	bandwidth   bool
	bytes       bool // cells are bytes per block
}

var groups = []groupInfo{
	{name: "alloc_free", title: "alloc+free of one block (wall time per pair)"},
	{name: "alloc_goroutines", byCount: "GOROUTINES",
		title: "alloc+free of 64 B in N goroutines at once: CPU time per pair (the process's CPU time / pairs); with more goroutines than CPUs this measures fairness and contention, not parallel speed"},
	{name: "block_memory", bytes: true, title: "resident memory per block, up to 1,000,000 live (every byte written; the pointer array not counted)"},
	{name: "lock_size", title: "lock+unlock of a range not yet locked (time per pair; a driver call each)"},
	{name: "lock_regions", title: "with N regions locked: lock+unlock of a contained sub-range, and a lookup", byRegions: true},
	{name: "partition_alloc_free", title: "alloc+free of 64 B on allocators with each partition trait (mbind per chunk: all should cost the same)"},
	{name: "pin_huge", title: "pin a large region: map, mlock, munlock, unmap, with 4 KiB pages, with MADV_HUGEPAGE first, and in 2 MiB hugetlb pages"},
	{name: "h2d", title: "host→device copy bandwidth (in parentheses: of the driver peak, same size, this run)", bandwidth: true},
	{name: "d2h", title: "device→host copy bandwidth (in parentheses: of the driver peak)", bandwidth: true},
	{name: "small_copy", title: "small host→device copy on a queue: submit + synchronize"},
	{name: "device_alloc", title: "device alloc+free of 1 MiB: the device's caching pool against the driver (cuMemAlloc+cuMemFree)"},
}

// grid arranges a group's results by x (size or regions) and series.
type grid struct {
	xs     []int64
	series []string
	cell   map[string]map[int64]BenchResult
}

func gridOf(g groupInfo, results []BenchResult) *grid {
	gr := &grid{cell: map[string]map[int64]BenchResult{}}
	seenX := map[int64]bool{}
	for _, r := range results {
		if r.Group != g.name {
			continue
		}
		x := r.SizeBytes
		if g.byRegions {
			x = r.Regions
		}
		if g.byCount != "" {
			x = r.Goroutines
		}
		if gr.cell[r.Series] == nil {
			gr.cell[r.Series] = map[int64]BenchResult{}
			gr.series = append(gr.series, r.Series)
		}
		gr.cell[r.Series][x] = r
		if !seenX[x] {
			seenX[x] = true
			gr.xs = append(gr.xs, x)
		}
	}
	sort.Slice(gr.xs, func(i, j int) bool { return gr.xs[i] < gr.xs[j] })
	return gr
}

func writeBenchTable(w io.Writer, rep *BenchReport) {
	fmt.Fprintf(w, "%s bench: %s %s/%s, %d CPUs, %s run: %d runs of %s per case\n", programName, rep.Go, rep.OS, rep.Arch, rep.CPUs,
		rep.Mode, rep.RunsPerCase, rep.TimePerCase)
	if rep.Device != nil {
		fmt.Fprintf(w, "transfers on device %d (%s %s)\n", rep.Device.Number, rep.Device.Plugin, rep.Device.Name)
		if len(rep.Device.HostNodes) > 0 {
			where := "the device's node is unknown: buffers where the kernel put them"
			if rep.Device.NUMANode >= 0 {
				where = fmt.Sprintf("placed on the device's node %d", rep.Device.NUMANode)
			}
			var parts []string
			for _, s := range []string{"pageable", "registered", "pinned", peakSeries} {
				if n, ok := rep.Device.HostNodes[s]; ok {
					parts = append(parts, s+" "+n)
				}
			}
			fmt.Fprintf(w, "host buffers' NUMA nodes (%s): %s\n", where, strings.Join(parts, ", "))
		}
	}
	var failures []string
	seen := map[string]bool{}
	for _, g := range groups {
		gr := gridOf(g, rep.Results)
		if len(gr.xs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", g.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "SIZE"
		if g.byRegions {
			head = "REGIONS"
		}
		if g.byCount != "" {
			head = g.byCount
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", head, strings.Join(gr.series, "\t"))
		for _, x := range gr.xs {
			label := fmtBytes(x)
			if g.byRegions || g.byCount != "" {
				label = fmt.Sprint(x)
			}
			cells := []string{label}
			for _, s := range gr.series {
				r, ok := gr.cell[s][x]
				switch {
				case !ok:
					cells = append(cells, "")
				case r.Error != "":
					cells = append(cells, "failed")
					msg := fmt.Sprintf("%s %s: %s", g.name, s, r.Error)
					if !seen[msg] {
						seen[msg] = true
						failures = append(failures, fmt.Sprintf("%s %s %s: %s", g.name, s, label, r.Error))
					}
				default:
					cells = append(cells, cellText(r))
				}
			}
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
		tw.Flush()
	}
	// One line per reason: "skipped h2d, d2h, small_copy: no accelerator".
	var reasons []string
	byReason := map[string][]string{}
	for _, s := range rep.Skipped {
		if byReason[s.Reason] == nil {
			reasons = append(reasons, s.Reason)
		}
		byReason[s.Reason] = append(byReason[s.Reason], s.Group)
	}
	for _, r := range reasons {
		fmt.Fprintf(w, "\nskipped %s: %s\n", strings.Join(byReason[r], ", "), r)
	}
	if len(rep.Goals) > 0 {
		fmt.Fprintln(w, "\ngoals:")
		for _, g := range rep.Goals {
			fmt.Fprintf(w, "  %-10s %s: %s\n", g.Status, g.Goal, g.Detail)
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, f := range failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	fmt.Fprintf(w, "\n(%s in all, %s run; each figure is the median of %d runs of %s, in brackets the fastest and slowest:\n"+
		"a wide bracket is noise, not a result. Times are wall-clock per operation except alloc_goroutines, which is CPU\n"+
		"time: on a busy machine wall time also counts time the process waited for a CPU, so the 64 B pair of\n"+
		"alloc_free can read higher than alloc_goroutines' 1-goroutine figure. Compare within a run.)\n",
		time.Duration(rep.ElapsedNs).Round(100*time.Millisecond), rep.Mode, rep.RunsPerCase, rep.TimePerCase)
}

// cellText is a result as the table and the progress lines show it: the
// median run's figure and, with more than one run, the fastest and slowest
// in brackets; "failed: why" for a failed case.
func cellText(r BenchResult) string {
	if r.Error != "" {
		return "failed: " + r.Error
	}
	var g groupInfo
	for _, x := range groups {
		if x.name == r.Group {
			g = x
		}
	}
	switch {
	case g.bytes:
		return fmt.Sprintf("%.0f B", r.BytesPerBlock)
	case g.bandwidth:
		s := fmtRate(r.GBPerS)
		if r.OfPeak > 0 {
			s += fmt.Sprintf(" (%.0f%%)", r.OfPeak*100)
		}
		if r.Runs > 1 && r.NsMin > 0 && r.NsMax > 0 {
			s += fmt.Sprintf(" [%s–%s]", fmtRate(float64(r.SizeBytes)/r.NsMax), fmtRate(float64(r.SizeBytes)/r.NsMin))
		}
		return s
	}
	s := fmtNs(r.NsPerOp)
	if r.Runs > 1 && r.NsMin > 0 {
		s += fmt.Sprintf(" [%s–%s]", fmtNs(r.NsMin), fmtNs(r.NsMax))
	}
	return s
}
