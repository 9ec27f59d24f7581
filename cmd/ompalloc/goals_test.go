package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func bw(group, series string, size int64, gbps float64) BenchResult {
	return BenchResult{Group: group, Series: series, SizeBytes: size, GBPerS: gbps, NsPerOp: float64(size) / gbps, Iterations: 1}
}

func lat(series string, size int64, ns float64) BenchResult {
	return BenchResult{Group: "small_copy", Series: series, SizeBytes: size, NsPerOp: ns, Iterations: 1}
}

// ours/peak is set for every transfer that has a peak of the same direction
// and size, and the goals are judged from it.
func TestBenchGoals(t *testing.T) {
	const big = 256 << 20
	for _, tc := range []struct {
		name          string
		results       []BenchResult
		peak, staging string
		detail        string
	}{
		{"met", []BenchResult{
			bw("h2d", "pinned", big, 50), bw("h2d", "registered", big, 49), bw("h2d", peakSeries, big, 51),
			bw("d2h", "pinned", big, 52), bw("d2h", "registered", big, 52), bw("d2h", peakSeries, big, 53),
			bw("h2d", "pinned", 4<<10, 1), bw("h2d", peakSeries, 4<<10, 5), // small sizes do not count
			lat("staged", 64, 10e3), lat("unstaged", 64, 30e3), lat("staged", 4096, 12e3), lat("unstaged", 4096, 31e3),
		}, goalMet, goalMet, "lowest of 4: h2d registered 256 MiB at 96.1% of the peak"},
		{"one series below 95%", []BenchResult{
			bw("h2d", "pinned", big, 50), bw("h2d", "registered", big, 40), bw("h2d", peakSeries, big, 51),
			lat("staged", 64, 10e3), lat("unstaged", 64, 9e3),
		}, goalMissed, goalMissed, "h2d registered 256 MiB at 78.4%"},
		{"a failed series", []BenchResult{
			{Group: "d2h", Series: "pinned", SizeBytes: big, Error: "ompalloc: pin failed"}, bw("d2h", peakSeries, big, 51),
		}, goalMissed, goalUnmeasured, "d2h pinned 256 MiB failed: ompalloc: pin failed"},
		{"no peak (HSA, or sizes too small)", []BenchResult{
			bw("h2d", "pinned", big, 50), bw("h2d", "pinned", 1<<20, 50), bw("h2d", peakSeries, 1<<20, 50),
		}, goalUnmeasured, goalUnmeasured, "no driver-peak result at these sizes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &BenchReport{Results: tc.results}
			annotatePeak(rep)
			for _, r := range rep.Results {
				switch {
				case r.Group == "small_copy" || r.Series == peakSeries || r.Error != "":
					require.Zero(t, r.OfPeak, "%+v", r)
				case r.SizeBytes == big && tc.name != "no peak (HSA, or sizes too small)":
					require.InDelta(t, r.GBPerS/map[string]float64{"h2d": 51, "d2h": 53}[r.Group], r.OfPeak, 1e-9, "%+v", r)
				}
			}
			goals := benchGoals(rep)
			require.Len(t, goals, 2)
			require.Equal(t, tc.peak, goals[0].Status, goals[0].Detail)
			require.Contains(t, goals[0].Detail, tc.detail)
			require.Equal(t, tc.staging, goals[1].Status, goals[1].Detail)

			rep.Goals = goals
			var out bytes.Buffer
			writeBenchTable(&out, rep)
			require.Contains(t, out.String(), "goals:\n  "+tc.peak)
			if tc.name == "met" {
				require.Contains(t, out.String(), "50.0 GB/s (98%)", "ours/peak in the table")
			}
		})
	}
}
