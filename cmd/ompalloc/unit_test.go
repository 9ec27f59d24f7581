package main

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64", 64, true}, {"4K", 4096, true}, {"4KiB", 4096, true}, {"4kb", 4096, true},
		{" 1M ", 1 << 20, true}, {"1GiB", 1 << 30, true}, {"512B", 512, true},
		{"0", 0, false}, {"-1", 0, false}, {"abc", 0, false}, {"", 0, false}, {"K", 0, false},
		{"99999999999T", 0, false},
	} {
		got, err := parseSize(tc.in)
		if !tc.ok {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	l, err := parseList("64,4K,,1M", parseSize)
	require.NoError(t, err)
	require.Equal(t, []int64{64, 4096, 1 << 20}, l)
	_, err = parseList(",", parseSize)
	require.Error(t, err)
	n, err := parseCount("10k")
	require.NoError(t, err)
	require.EqualValues(t, 10000, n)
	_, err = parseCount("100M")
	require.Error(t, err, "bounded")
}

func TestFormat(t *testing.T) {
	require.Equal(t, "64 B", fmtBytes(64))
	require.Equal(t, "4 KiB", fmtBytes(4096))
	require.Equal(t, "1.5 MiB", fmtBytes(3<<19))
	require.Equal(t, "52.3 ns", fmtNs(52.31))
	require.Equal(t, "1.20 µs", fmtNs(1200))
	require.Equal(t, "150 ms", fmtNs(150e6))
	require.Equal(t, "-", fmtNs(0))
	require.Equal(t, "53.5 GB/s", fmtRate(53.5))
}

func TestMeasure(t *testing.T) {
	// Each operation spins for 10 µs (a sleep may oversleep by milliseconds
	// on a busy machine).
	const opTime = 10 * time.Microsecond
	const budget = 200 * time.Millisecond
	total := 0
	ns, n, err := measure(budget, func(k int) error {
		total += k
		for range k {
			for start := time.Now(); time.Since(start) < opTime; {
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, n, 1, "grows past one iteration")
	require.GreaterOrEqual(t, ns, float64(opTime), "at least the spin")
	require.LessOrEqual(t, total, int(2*budget/opTime), "bounded by the budget")

	boom := errors.New("boom")
	_, _, err = measure(time.Millisecond, func(int) error { return boom })
	require.ErrorIs(t, err, boom)
}

func TestLogAxis(t *testing.T) {
	a := newLogAxis([]float64{64, 4096, 1 << 20}, axisBytes)
	require.Equal(t, 64.0, a.lo)
	require.Equal(t, float64(1<<20), a.hi)
	require.Contains(t, a.ticks, 64.0)
	require.Contains(t, a.ticks, float64(1<<20))
	require.InDelta(t, 0, a.frac(64), 1e-9)
	require.InDelta(t, 1, a.frac(1<<20), 1e-9)
	require.Equal(t, "64 KiB", a.label(65536))

	y := newLogAxis([]float64{35, 9000}, axisTime)
	require.Equal(t, 10.0, y.lo)
	require.Equal(t, 10000.0, y.hi)
	require.Equal(t, "10 µs", y.label(10000))

	one := newLogAxis([]float64{100}, axisCount) // a single value still spans a range
	require.Less(t, one.lo, one.hi)
	empty := newLogAxis(nil, axisRate)
	require.False(t, math.IsNaN(empty.frac(5)))
}

func TestRenderSVGEmptyAndEscaped(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, renderSVG(&b, "a < b & c", nil, nil))
	svgDoc(t, b.Bytes())
	b.Reset()
	require.NoError(t, renderSVG(&b, "t", nil, []panel{{Title: "<x>", XKind: axisBytes, YKind: axisTime,
		Lines: []series{{Name: "one & only", Pts: []point{{X: 64, Y: 100}}}}}}))
	counts := svgDoc(t, b.Bytes())
	require.Equal(t, 1, counts["circle"], "a single point is a marker")
	require.Zero(t, counts["polyline"])
	require.True(t, strings.Contains(b.String(), "one &amp; only"))
}

// run is callable in-process, with its own writers.
func TestRunInProcess(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, exitUsage, run([]string{"info", "--json=maybe"}, &out, &errb))
	require.Contains(t, errb.String(), "Usage")
}

// Every group with results is charted, each point with an error bar from
// the fastest to the slowest run; the groups without results are named
// under the title with the reason (issue 22: the chart drew 3 of 7 groups
// without saying so, and one run per point read noise as a result).
func TestBenchChartEveryGroupWithSpread(t *testing.T) {
	rep := &BenchReport{RunsPerCase: 3, Skipped: []BenchSkip{{Group: "h2d", Reason: "no accelerator"}, {Group: "d2h", Reason: "no accelerator"}}}
	for _, g := range groups {
		switch g.name {
		case "h2d", "d2h":
			continue // skipped
		case "small_copy":
			rep.Results = append(rep.Results, BenchResult{Group: g.name, Series: "staged", SizeBytes: 64, Error: "boom"})
			continue
		}
		for _, x := range []int64{64, 4096} {
			r := BenchResult{Group: g.name, Series: "s", SizeBytes: x, Regions: x, Goroutines: x, NsPerOp: 100, NsMin: 80, NsMax: 150, Runs: 3}
			if g.bytes {
				r = BenchResult{Group: g.name, Series: "s", SizeBytes: x, BytesPerBlock: float64(x + 16), Runs: 1}
			}
			rep.Results = append(rep.Results, r)
		}
	}
	panels, notes := benchPanels(rep)
	require.Equal(t, []string{"not charted: h2d: no accelerator", "not charted: d2h: no accelerator",
		"not charted: small_copy: every case failed (see the table)"}, notes)
	require.Len(t, panels, len(groups)-3, "every other group has its panel")
	for _, p := range panels {
		require.Len(t, p.Lines, 1, p.Title)
		for _, pt := range p.Lines[0].Pts {
			if p.YKind == axisBytes {
				require.Zero(t, pt.Lo, "block_memory is one run")
				continue
			}
			require.Equal(t, point{X: pt.X, Y: 100, Lo: 80, Hi: 150}, pt, p.Title)
		}
	}
	var b bytes.Buffer
	require.NoError(t, renderSVG(&b, "t", notes, panels))
	svgDoc(t, b.Bytes())
	require.Equal(t, 2*(len(groups)-4), strings.Count(b.String(), `class="errbar"`), "a bar per timed point")
	require.Contains(t, b.String(), "not charted: small_copy")
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{5}, 5, 5, 5},
		{[]float64{9, 1, 5}, 5, 1, 9},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		med, lo, hi := spread(tc.in)
		require.Equal(t, []float64{tc.med, tc.lo, tc.hi}, []float64{med, lo, hi}, "%v", tc.in)
	}
	in := []float64{3, 1, 2}
	spread(in)
	require.Equal(t, []float64{3, 1, 2}, in, "the caller's slice is left as it was")
}
