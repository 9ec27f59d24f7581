package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

// With the fake CUDA driver (two simulated GPUs), info lists them as
// devices 0 and 1 before the host, and bench runs its GPU groups: transfers
// from pageable, pinned and registered memory, and small copies with and
// without staging.
func TestFakeGPU(t *testing.T) {
	lib := fakedrv.Build(t, "fakecuda")
	env := []string{"OMPALLOC_CUDA_LIBRARY=" + lib, "OMPALLOC_DISABLE_HSA=1"}

	r := ompalloc(t, env, "info", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var info InfoReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &info))
	require.Equal(t, 2, info.NumDevices)
	require.Equal(t, 2, info.InitialDevice)
	require.Equal(t, "cuda", info.Devices[0].Plugin)
	require.Equal(t, "nvidia", info.Devices[0].Vendor)
	require.NotEmpty(t, info.Devices[0].Capability)
	require.True(t, info.Devices[0].Default)
	require.True(t, info.Devices[2].Initial)
	var cuda *DriverInfo
	for i := range info.Drivers {
		if info.Drivers[i].Plugin == "cuda" {
			cuda = &info.Drivers[i]
		}
	}
	require.NotNil(t, cuda)
	require.Equal(t, lib, cuda.Library)
	require.Equal(t, "CUDA_SUCCESS", cuda.Init)
	require.True(t, cuda.Usable)
	require.NotEmpty(t, cuda.Version)

	svg := filepath.Join(t.TempDir(), "gpu.svg")
	r = ompalloc(t, env, "bench", "--json", "--svg", svg, "--time", "10ms", "--sizes", "64,4096", "--regions", "100")
	require.Equal(t, 0, r.code, r.stderr)
	var rep BenchReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.NotNil(t, rep.Device)
	require.Equal(t, 0, rep.Device.Number)
	require.Equal(t, "cuda", rep.Device.Plugin)
	require.Empty(t, rep.Skipped)
	count := map[string]int{}
	for _, res := range rep.Results {
		require.Empty(t, res.Error, "%+v", res)
		require.Greater(t, res.NsPerOp, 0.0, "%+v", res)
		count[res.Group+"/"+res.Series]++
		if res.Group == "h2d" || res.Group == "d2h" {
			require.Greater(t, res.GBPerS, 0.0)
		}
	}
	for _, s := range []string{"h2d/pageable", "h2d/pinned", "h2d/registered", "d2h/pageable", "d2h/pinned",
		"d2h/registered", "small_copy/staged", "small_copy/unstaged", "small_copy/pinned source", "lock_size/device 0 (cuda)"} {
		require.Equal(t, 2, count[s], s)
	}
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	counts := svgDoc(t, data)
	require.GreaterOrEqual(t, counts["polyline"], 6)
	require.True(t, strings.Contains(string(data), "D2H registered"))
}
