package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ompalloc/ompalloc/target"
)

const timelineUsageText = `
Draws a device-memory timeline recorded by a program (target.RecordMemoryHistory,
then target.WriteMemoryHistory to FILE) as an SVG chart: per device, the bytes
allocated (solid) and reserved from the driver (dashed) against time, with a
tick for every allocation (above the axis) and free (below) — what PyTorch's
memory snapshot viewer shows, without a browser tool. Prints each device's
events and peaks.

Flags:
`

func timelineFlags() (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	svg := fs.String("svg", "", "write the chart to `FILE` (default: FILE with .svg for .json)")
	return fs, svg
}

var timelineUsage = func() string {
	fs, _ := timelineFlags()
	return "Usage: ompalloc timeline " + synopsis(fs, len("Usage: ompalloc timeline "), 78) + " FILE\n" + timelineUsageText
}()

func runTimeline(args []string, stdout, stderr io.Writer) int {
	fs, svg := timelineFlags()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout, fs, timelineUsage)
		return exitOK
	case err == nil && fs.NArg() != 1:
		err = fmt.Errorf("want one FILE, the JSON of target.WriteMemoryHistory (got %d arguments)", fs.NArg())
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s timeline: %v\n\n", programName, err)
		printUsage(stderr, fs, timelineUsage)
		return exitUsage
	}
	in := fs.Arg(0)
	out := *svg
	if out == "" {
		out = strings.TrimSuffix(in, ".json") + ".svg"
	}
	events, err := readTimeline(in)
	if err != nil {
		fmt.Fprintf(stderr, "%s timeline: %v\n", programName, err)
		return exitFailed
	}
	f, err := os.Create(out)
	if err == nil {
		bw := bufio.NewWriter(f)
		err = errors.Join(drawTimeline(bw, in, events), bw.Flush(), f.Close())
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s timeline: %v\n", programName, err)
		return exitFailed
	}
	for _, s := range timelineSummary(events) {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintf(stdout, "chart written to %s\n", out)
	return exitOK
}

// readTimeline reads and checks the JSON of target.WriteMemoryHistory.
func readTimeline(path string) ([]target.MemoryEvent, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Schema string               `json:"schema"`
		Events []target.MemoryEvent `json:"events"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a memory timeline: %v", path, err)
	}
	if doc.Schema != target.MemoryTimelineSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q (written by target.WriteMemoryHistory)", path, doc.Schema, target.MemoryTimelineSchema)
	}
	return doc.Events, nil
}

// byDevice splits the events by device, in device order.
func byDevice(events []target.MemoryEvent) (devs []int, per map[int][]target.MemoryEvent) {
	per = map[int][]target.MemoryEvent{}
	for _, e := range events {
		if _, ok := per[e.Device]; !ok {
			devs = append(devs, e.Device)
		}
		per[e.Device] = append(per[e.Device], e)
	}
	sort.Ints(devs)
	return devs, per
}

func timelineSummary(events []target.MemoryEvent) []string {
	devs, per := byDevice(events)
	out := []string{fmt.Sprintf("%d events on %d devices", len(events), len(devs))}
	for _, d := range devs {
		var allocs, frees int
		var peakA, peakR uint64
		for _, e := range per[d] {
			if e.Op == "alloc" {
				allocs++
			} else {
				frees++
			}
			peakA, peakR = max(peakA, e.Allocated), max(peakR, e.Reserved)
		}
		out = append(out, fmt.Sprintf("device %d: %d allocations, %d frees, peak allocated %s, peak reserved %s",
			d, allocs, frees, bytesLabel(peakA), bytesLabel(peakR)))
	}
	return out
}

func bytesLabel(v uint64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(v)/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(v)/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(v)/(1<<10))
	}
	return fmt.Sprintf("%d B", v)
}

// drawTimeline writes the chart: a panel per device, time on x (linear),
// bytes on y (linear, from 0), allocated solid, reserved dashed, event
// ticks along the axis.
func drawTimeline(w io.Writer, title string, events []target.MemoryEvent) error {
	devs, per := byDevice(events)
	const width, panelH, left, right, top = 900, 240, 90, 30, 50
	height := top + max(1, len(devs))*(panelH+40) + 20
	var tmax time.Duration
	for _, e := range events {
		tmax = max(tmax, e.T)
	}
	if tmax == 0 {
		tmax = time.Microsecond
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="24" font-size="16">device memory: %s</text>`+"\n", left, esc(title))
	if len(devs) == 0 {
		p(`<text x="%d" y="%d">no events recorded</text>`+"\n", left, top+20)
	}
	plotW := float64(width - left - right)
	for i, d := range devs {
		evs := per[d]
		y0 := float64(top + i*(panelH+40) + panelH)
		var ymax uint64 = 1
		for _, e := range evs {
			ymax = max(ymax, e.Reserved, e.Allocated)
		}
		x := func(t time.Duration) float64 { return float64(left) + plotW*float64(t)/float64(tmax) }
		y := func(v uint64) float64 { return y0 - float64(panelH-20)*float64(v)/float64(ymax) }
		p(`<g class="device" id="device-%d">`+"\n", d)
		p(`<text x="%d" y="%.1f" font-weight="bold">device %d: peak allocated %s, peak reserved %s</text>`+"\n",
			left, y0-float64(panelH)+8, d, bytesLabel(peak(evs, false)), bytesLabel(peak(evs, true)))
		p(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, y0, float64(left)+plotW, y0)
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", left, y0, left, y0-float64(panelH-20))
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(ymax)+4, bytesLabel(ymax))
		p(`<text x="%d" y="%.1f" text-anchor="end">0</text>`+"\n", left-6, y0+4)
		p(`<text x="%.1f" y="%.1f" text-anchor="end">%v</text>`+"\n", float64(left)+plotW, y0+28, tmax.Round(time.Microsecond))
		for _, line := range []struct {
			reserved bool
			class    string
			style    string
		}{{true, "reserved", `stroke="#d62728" stroke-dasharray="6 4"`}, {false, "allocated", `stroke="#1f77b4"`}} {
			var pts []string
			prev := uint64(0)
			for _, e := range evs {
				v := e.Allocated
				if line.reserved {
					v = e.Reserved
				}
				// A step: the figure holds until the event.
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(e.T), y(prev)), fmt.Sprintf("%.1f,%.1f", x(e.T), y(v)))
				prev = v
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(left)+plotW, y(prev)))
			p(`<polyline class="%s" fill="none" stroke-width="1.5" %s points="%s"/>`+"\n", line.class, line.style, strings.Join(pts, " "))
		}
		for _, e := range evs {
			dy := -6.0
			if e.Op == "free" {
				dy = 6
			}
			p(`<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555"><title>%s %s of %s at %#x (%s)</title></line>`+"\n",
				e.Op, x(e.T), y0, x(e.T), y0+dy, e.Op, e.Path, bytesLabel(e.Bytes), e.Addr, e.T)
		}
		p(`<text x="%.1f" y="%.1f" fill="#1f77b4">allocated</text><text x="%.1f" y="%.1f" fill="#d62728">reserved</text>`+"\n",
			float64(left)+plotW-140, y0-float64(panelH)+8, float64(left)+plotW-60, y0-float64(panelH)+8)
		p("</g>\n")
	}
	p("</svg>\n")
	return nil
}

func peak(evs []target.MemoryEvent, reserved bool) uint64 {
	var m uint64
	for _, e := range evs {
		if reserved {
			m = max(m, e.Reserved)
		} else {
			m = max(m, e.Allocated)
		}
	}
	return m
}
