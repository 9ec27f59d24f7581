package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// A small SVG plotter: log-log line charts, one panel per group, one line
// per series, error bars from the fastest to the slowest run, axis labels
// and a legend; groups with no results are listed under the title. No
// dependencies; the output is a standalone SVG 1.1 document.

type axisKind int

const (
	axisBytes axisKind = iota // powers of two, labelled "4 KiB"
	axisCount                 // decades, labelled "10000"
	axisTime                  // nanoseconds, decades, labelled "1.00 µs"
	axisRate                  // GB/s, decades
)

// point is one measured case: Y the median run, Lo and Hi the spread (0:
// none drawn).
type point struct{ X, Y, Lo, Hi float64 }

type series struct {
	Name string
	Pts  []point
}

type panel struct {
	Title, XLabel, YLabel string
	XKind, YKind          axisKind
	Lines                 []series
}

// palette: distinguishable on white, also in grey print.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	svgWidth   = 820
	panelH     = 360
	plotLeft   = 100
	plotWidth  = 480
	plotTop    = 44  // within a panel
	plotHeight = 250 // plot area height
	legendX    = plotLeft + plotWidth + 24
)

// logAxis is a log scale from lo to hi with its tick values.
type logAxis struct {
	lo, hi float64
	ticks  []float64
	kind   axisKind
}

func newLogAxis(vals []float64, kind axisKind) logAxis {
	mn, mx := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
			mn, mx = math.Min(mn, v), math.Max(mx, v)
		}
	}
	if math.IsInf(mn, 1) {
		mn, mx = 1, 10
	}
	base := 10.0
	if kind == axisBytes {
		base = 2
	}
	lg := func(v float64) float64 { return math.Log(v) / math.Log(base) }
	elo, ehi := math.Floor(lg(mn)+1e-9), math.Ceil(lg(mx)-1e-9)
	if ehi <= elo {
		elo, ehi = elo-1, ehi+1
	}
	step := math.Max(1, math.Ceil((ehi-elo)/8))
	if kind == axisBytes && step > 1 && int(step)%2 == 1 {
		step++ // powers of 4, 16, ...: byte labels stay round
	}
	elo = ehi - step*math.Ceil((ehi-elo)/step) // a tick at each end
	a := logAxis{lo: math.Pow(base, elo), hi: math.Pow(base, ehi), kind: kind}
	for e := elo; e <= ehi+1e-9; e += step {
		a.ticks = append(a.ticks, math.Pow(base, e))
	}
	return a
}

// frac is v's position on the axis, 0 at lo and 1 at hi.
func (a logAxis) frac(v float64) float64 {
	return (math.Log(v) - math.Log(a.lo)) / (math.Log(a.hi) - math.Log(a.lo))
}

func (a logAxis) label(v float64) string {
	switch a.kind {
	case axisBytes:
		return fmtBytes(int64(math.Round(v)))
	case axisTime:
		for _, u := range []struct {
			scale float64
			name  string
		}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
			if v >= u.scale {
				return fmt.Sprintf("%g %s", v/u.scale, u.name)
			}
		}
		return fmt.Sprintf("%g ns", v)
	case axisRate:
		return fmt.Sprintf("%g GB/s", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// renderSVG writes the panels, stacked, as one SVG document; notes are
// lines under the title (what is not charted, and why).
func renderSVG(w io.Writer, title string, notes []string, panels []panel) error {
	bw := bufio.NewWriter(w)
	top := 40 + 16*len(notes)
	height := top + panelH*len(panels)
	if len(panels) == 0 {
		height = top + 40
	}
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(bw, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", 16, esc(title))
	for i, n := range notes {
		fmt.Fprintf(bw, `<text x="16" y="%d">%s</text>`+"\n", 42+16*i, esc(n))
	}
	if len(panels) == 0 {
		fmt.Fprintf(bw, `<text x="16" y="%d">no results</text>`+"\n", top+16)
	}
	for i, p := range panels {
		drawPanel(bw, p, top+i*panelH)
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

func drawPanel(w io.Writer, p panel, top int) {
	var xs, ys []float64
	for _, l := range p.Lines {
		for _, pt := range l.Pts {
			xs, ys = append(xs, pt.X), append(ys, pt.Y, pt.Lo, pt.Hi)
		}
	}
	xa, ya := newLogAxis(xs, p.XKind), newLogAxis(ys, p.YKind)
	x0, y0 := float64(plotLeft), float64(top+plotTop)
	px := func(v float64) float64 { return x0 + xa.frac(v)*plotWidth }
	py := func(v float64) float64 { return y0 + (1-ya.frac(v))*plotHeight }

	fmt.Fprintf(w, `<g>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", plotLeft, top+24, esc(p.Title))
	// Grid and tick labels.
	var grid strings.Builder
	for _, t := range xa.ticks {
		x := px(t)
		fmt.Fprintf(&grid, "M%.1f %.1fV%.1f", x, y0, y0+plotHeight)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+plotHeight+16, esc(xa.label(t)))
	}
	for _, t := range ya.ticks {
		y := py(t)
		fmt.Fprintf(&grid, "M%.1f %.1fH%.1f", x0, y, x0+plotWidth)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, esc(ya.label(t)))
	}
	fmt.Fprintf(w, `<path d="%s" stroke="#dddddd" stroke-width="1" fill="none"/>`+"\n", grid.String())
	// Axes.
	fmt.Fprintf(w, `<path d="M%.1f %.1fV%.1fH%.1f" stroke="black" stroke-width="1" fill="none"/>`+"\n",
		x0, y0, y0+plotHeight, x0+plotWidth)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x0+plotWidth/2, y0+plotHeight+36, esc(p.XLabel+" (log scale)"))
	fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="middle" transform="rotate(-90 %d %.1f)">%s</text>`+"\n",
		18, y0+plotHeight/2, 18, y0+plotHeight/2, esc(p.YLabel+" (log scale)"))
	// Lines, markers and the legend.
	for i, l := range p.Lines {
		color := palette[i%len(palette)]
		var pts []string
		for _, pt := range l.Pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.X), py(pt.Y)))
		}
		if len(pts) > 1 {
			fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		}
		for _, pt := range l.Pts {
			fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(pt.X), py(pt.Y), color)
			if pt.Lo > 0 && pt.Hi > pt.Lo {
				// The error bar: fastest to slowest run, capped.
				x, lo, hi := px(pt.X), py(pt.Lo), py(pt.Hi)
				fmt.Fprintf(w, `<path class="errbar" d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f" stroke="%s" stroke-width="1" fill="none"/>`+"\n",
					x, lo, hi, x-3, lo, x+3, x-3, hi, x+3, color)
			}
		}
		ly := float64(top+plotTop+8) + float64(i)*18
		fmt.Fprintf(w, `<path d="M%d %.1fH%d" stroke="%s" stroke-width="3"/>`+"\n", legendX, ly, legendX+22, color)
		fmt.Fprintf(w, `<text x="%d" y="%.1f">%s</text>`+"\n", legendX+28, ly+4, esc(l.Name))
	}
	fmt.Fprintf(w, "</g>\n")
}

// benchPanels turns a report into chart panels: one per group that has
// results, the two copy directions together; notes name every group
// without results and why (skipped, or failed in every case).
func benchPanels(rep *BenchReport) (out []panel, notes []string) {
	charted := map[string]bool{}
	add := func(p panel, gnames []string, prefix map[string]string, rate bool) {
		for _, gn := range gnames {
			var g groupInfo
			for _, x := range groups {
				if x.name == gn {
					g = x
				}
			}
			gr := gridOf(g, rep.Results)
			for _, s := range gr.series {
				line := series{Name: prefix[gn] + s}
				for _, x := range gr.xs {
					r, ok := gr.cell[s][x]
					if !ok || r.Error != "" {
						continue
					}
					pt := point{X: float64(x), Y: r.NsPerOp, Lo: r.NsMin, Hi: r.NsMax}
					switch {
					case g.bytes:
						pt = point{X: float64(x), Y: r.BytesPerBlock}
					case rate && r.NsMin > 0 && r.NsMax > 0:
						pt = point{X: float64(x), Y: r.GBPerS, Lo: float64(r.SizeBytes) / r.NsMax, Hi: float64(r.SizeBytes) / r.NsMin}
					case rate:
						pt = point{X: float64(x), Y: r.GBPerS}
					}
					if pt.Y <= 0 {
						continue
					}
					line.Pts = append(line.Pts, pt)
				}
				if len(line.Pts) > 0 {
					p.Lines = append(p.Lines, line)
					charted[gn] = true
				}
			}
		}
		if len(p.Lines) > 0 {
			out = append(out, p)
		}
	}
	add(panel{Title: "alloc + free (wall time)", XLabel: "block size", YLabel: "time per pair", XKind: axisBytes, YKind: axisTime},
		[]string{"alloc_free"}, nil, false)
	add(panel{Title: "alloc + free of 64 B in N goroutines at once (CPU time)", XLabel: "goroutines", YLabel: "CPU time per pair", XKind: axisCount, YKind: axisTime},
		[]string{"alloc_goroutines"}, nil, false)
	add(panel{Title: "resident memory per block, up to 1,000,000 live", XLabel: "block size", YLabel: "bytes per block", XKind: axisBytes, YKind: axisBytes},
		[]string{"block_memory"}, nil, false)
	add(panel{Title: "lock + unlock of a new range", XLabel: "range size", YLabel: "time per pair", XKind: axisBytes, YKind: axisTime},
		[]string{"lock_size"}, nil, false)
	add(panel{Title: "registry with N locked regions", XLabel: "locked regions", YLabel: "time per operation", XKind: axisCount, YKind: axisTime},
		[]string{"lock_regions"}, nil, false)
	add(panel{Title: "alloc + free of 64 B by partition trait", XLabel: "block size", YLabel: "time per pair", XKind: axisBytes, YKind: axisTime},
		[]string{"partition_alloc_free"}, nil, false)
	add(panel{Title: "pin a large region: map, mlock, munlock, unmap", XLabel: "region size", YLabel: "time", XKind: axisBytes, YKind: axisTime},
		[]string{"pin_huge"}, nil, false)
	dev := ""
	if rep.Device != nil {
		dev = fmt.Sprintf(" (device %d, %s)", rep.Device.Number, rep.Device.Name)
	}
	add(panel{Title: "copy bandwidth" + dev, XLabel: "copy size", YLabel: "bandwidth", XKind: axisBytes, YKind: axisRate},
		[]string{"h2d", "d2h"}, map[string]string{"h2d": "H2D ", "d2h": "D2H "}, true)
	add(panel{Title: "small copy on a queue: submit + synchronize" + dev, XLabel: "copy size", YLabel: "latency", XKind: axisBytes, YKind: axisTime},
		[]string{"small_copy"}, nil, false)
	add(panel{Title: "device alloc + free, pool vs driver" + dev, XLabel: "block size", YLabel: "time per pair", XKind: axisBytes, YKind: axisTime},
		[]string{"device_alloc"}, nil, false)

	why := map[string]string{}
	for _, s := range rep.Skipped {
		if _, ok := why[s.Group]; !ok {
			why[s.Group] = s.Reason
		}
	}
	for _, g := range groups {
		if charted[g.name] {
			continue
		}
		reason, ok := why[g.name]
		switch {
		case ok:
		case len(gridOf(g, rep.Results).xs) > 0:
			reason = "every case failed (see the table)"
		default:
			reason = "not run"
		}
		notes = append(notes, fmt.Sprintf("not charted: %s: %s", g.name, reason))
	}
	return out, notes
}

func writeSVGFile(path string, rep *BenchReport) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--svg: %w", err)
	}
	title := fmt.Sprintf("ompalloc bench — %s/%s, %d CPUs, %s", rep.OS, rep.Arch, rep.CPUs, rep.Go)
	title += fmt.Sprintf("; median of %d runs per case, bars from the fastest to the slowest", rep.RunsPerCase)
	panels, notes := benchPanels(rep)
	err = renderSVG(f, title, notes, panels)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--svg %s: %w", path, err)
	}
	return nil
}
