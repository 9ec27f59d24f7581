package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/target"
)

// writeTimeline writes a timeline file as target.WriteMemoryHistory does.
func writeTimeline(t *testing.T, schema string, events []target.MemoryEvent) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mem.json")
	data, err := json.Marshal(map[string]any{"schema": schema, "events": events})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// Issue 31 item 2: the timeline a program recorded, drawn as an SVG per
// device (allocated and reserved steps, a tick per event), with its peaks.
func TestTimelineDrawsEachDevice(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	events := []target.MemoryEvent{
		{T: ms(1), Device: 0, Op: "alloc", Path: "pool", Addr: 0x1000, Bytes: 1 << 20, Allocated: 1 << 20, Reserved: 2 << 20},
		{T: ms(2), Device: 2, Op: "alloc", Path: "direct", Addr: 0x9000, Bytes: 4 << 20, Allocated: 4 << 20, Reserved: 4 << 20},
		{T: ms(3), Device: 0, Op: "alloc", Path: "direct", Addr: 0x2000, Bytes: 3 << 20, Allocated: 4 << 20, Reserved: 5 << 20},
		{T: ms(4), Device: 0, Op: "free", Path: "pool", Addr: 0x1000, Bytes: 1 << 20, Allocated: 3 << 20, Reserved: 5 << 20},
	}
	in := writeTimeline(t, target.MemoryTimelineSchema, events)
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"timeline", in}, &out, &errb), errb.String())
	require.Contains(t, out.String(), "4 events on 2 devices")
	require.Contains(t, out.String(), "device 0: 2 allocations, 1 frees, peak allocated 4.00 MiB, peak reserved 5.00 MiB")
	require.Contains(t, out.String(), "device 2: 1 allocations, 0 frees, peak allocated 4.00 MiB")
	svgPath := strings.TrimSuffix(in, ".json") + ".svg"
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(svg, new(struct{})), "well-formed XML")
	require.Equal(t, 2, strings.Count(string(svg), `<g class="device"`))
	require.Equal(t, 2, strings.Count(string(svg), `class="allocated"`))
	require.Equal(t, 2, strings.Count(string(svg), `class="reserved"`))
	require.Equal(t, 3, strings.Count(string(svg), `<line class="alloc"`))
	require.Equal(t, 1, strings.Count(string(svg), `<line class="free"`))
	require.Contains(t, string(svg), "device 0: peak allocated 4.00 MiB, peak reserved 5.00 MiB")

	other := filepath.Join(t.TempDir(), "chart.svg")
	require.Equal(t, exitOK, run([]string{"timeline", "--svg", other, in}, &out, &errb), errb.String())
	require.FileExists(t, other)
}

// Bad input: a clear error naming what was wrong, nothing written.
func TestTimelineBadInput(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, exitUsage, run([]string{"timeline"}, &out, &errb))
	require.Contains(t, errb.String(), "want one FILE")
	errb.Reset()
	wrong := writeTimeline(t, "ompalloc-bench/1", nil)
	require.Equal(t, exitFailed, run([]string{"timeline", wrong}, &out, &errb))
	require.Contains(t, errb.String(), `schema "ompalloc-bench/1", want "ompalloc-memory-timeline/1"`)
	require.NoFileExists(t, strings.TrimSuffix(wrong, ".json")+".svg")
	errb.Reset()
	require.Equal(t, exitFailed, run([]string{"timeline", filepath.Join(t.TempDir(), "none.json")}, &out, &errb))
	require.Contains(t, errb.String(), "no such file")
	empty := writeTimeline(t, target.MemoryTimelineSchema, []target.MemoryEvent{})
	out.Reset()
	require.Equal(t, exitOK, run([]string{"timeline", empty}, &out, &errb))
	require.Contains(t, out.String(), "0 events on 0 devices")
}
