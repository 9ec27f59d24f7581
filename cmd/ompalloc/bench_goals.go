package main

import (
	"fmt"
	"sort"
)

// BenchGoal is one of the targets a GPU run is judged by (README,
// "Transfers"), as this run measured it.
type BenchGoal struct {
	Goal   string `json:"goal"`
	Status string `json:"status"` // "met", "missed", or "unmeasured" (why in detail)
	Detail string `json:"detail"`
}

// Goal statuses.
const (
	goalMet        = "met"
	goalMissed     = "missed"
	goalUnmeasured = "unmeasured"
)

// Thresholds of the transfer goal: from 64 MiB on, copies from ompalloc's
// pinned memory reach 95% of the driver's own.
const (
	peakGoalFrom  = 64 << 20
	peakGoalShare = 0.95
)

// annotatePeak sets OfPeak on every h2d/d2h result that has a driver-peak
// result of the same direction and size in the report.
func annotatePeak(rep *BenchReport) {
	peak := map[string]float64{}
	key := func(r BenchResult) string { return fmt.Sprintf("%s/%d", r.Group, r.SizeBytes) }
	for _, r := range rep.Results {
		if r.Series == peakSeries && r.Error == "" && r.GBPerS > 0 {
			peak[key(r)] = r.GBPerS
		}
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		if p := peak[key(*r)]; p > 0 && r.Series != peakSeries && r.Error == "" && r.GBPerS > 0 {
			r.OfPeak = r.GBPerS / p
		}
	}
}

// benchGoals judges the run against the transfer goals.
func benchGoals(rep *BenchReport) []BenchGoal {
	return []BenchGoal{peakGoal(rep), stagingGoal(rep)}
}

func peakGoal(rep *BenchReport) BenchGoal {
	g := BenchGoal{Goal: fmt.Sprintf("h2d and d2h from pinned and registered memory reach %.0f%% of the driver's peak from %s on",
		peakGoalShare*100, fmtBytes(peakGoalFrom))}
	var worst *BenchResult
	n := 0
	for i, r := range rep.Results {
		if (r.Group != "h2d" && r.Group != "d2h") || (r.Series != "pinned" && r.Series != "registered") || r.SizeBytes < peakGoalFrom {
			continue
		}
		if r.Error != "" {
			g.Status, g.Detail = goalMissed, fmt.Sprintf("%s %s %s failed: %s", r.Group, r.Series, fmtBytes(r.SizeBytes), r.Error)
			return g
		}
		if r.OfPeak == 0 {
			continue
		}
		n++
		if worst == nil || r.OfPeak < worst.OfPeak {
			worst = &rep.Results[i]
		}
	}
	if worst == nil {
		g.Status, g.Detail = goalUnmeasured, "no driver-peak result at these sizes (a CUDA device and --sizes reaching "+fmtBytes(peakGoalFrom)+" are needed)"
		return g
	}
	g.Status = goalMet
	if worst.OfPeak < peakGoalShare {
		g.Status = goalMissed
	}
	g.Detail = fmt.Sprintf("lowest of %d: %s %s %s at %.1f%% of the peak (%s)", n, worst.Group, worst.Series,
		fmtBytes(worst.SizeBytes), worst.OfPeak*100, fmtRate(worst.GBPerS))
	return g
}

func stagingGoal(rep *BenchReport) BenchGoal {
	g := BenchGoal{Goal: "small pageable copies through the staging pool beat direct pageable copies"}
	staged, unstaged := map[int64]BenchResult{}, map[int64]BenchResult{}
	for _, r := range rep.Results {
		if r.Group != "small_copy" || r.Error != "" || r.NsPerOp <= 0 {
			continue
		}
		switch r.Series {
		case "staged":
			staged[r.SizeBytes] = r
		case "unstaged":
			unstaged[r.SizeBytes] = r
		}
	}
	var sizes []int64
	for sz := range staged {
		if _, ok := unstaged[sz]; ok {
			sizes = append(sizes, sz)
		}
	}
	if len(sizes) == 0 {
		g.Status, g.Detail = goalUnmeasured, "no small_copy results for both staged and unstaged"
		return g
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	g.Status = goalMet
	worstSize, worst := int64(0), 0.0
	for _, sz := range sizes {
		ratio := staged[sz].NsPerOp / unstaged[sz].NsPerOp
		if ratio >= 1 {
			g.Status = goalMissed
		}
		if ratio > worst {
			worstSize, worst = sz, ratio
		}
	}
	g.Detail = fmt.Sprintf("staged/unstaged time at worst %.2f (%s; %d sizes)", worst, fmtBytes(worstSize), len(sizes))
	return g
}
