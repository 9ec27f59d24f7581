package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// The command is tested end to end: built once per test binary with the go
// tool, then run as a user would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	testenv.Neutralize() // the CLI runs in children with the settings each test gives
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("the go tool is not on PATH")
	}
	return p, nil
}

// binary builds cmd/ompalloc (cgo-free, as users get it) once, or takes
// the one OMPALLOC_TEST_CLI names (built beforehand, where no go tool runs:
// the NUMA guest of scripts/numa-vm.sh).
func binary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("OMPALLOC_TEST_CLI"); p != "" {
		return p
	}
	goBin, err := goTool()
	if err != nil {
		t.Skipf("cannot build the command: %v", err)
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "ompalloc-cmd-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "ompalloc")
		cmd := exec.Command(goBin, "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

type result struct {
	code           int
	stdout, stderr string
}

// ompalloc runs the built command with a time bound; env adds variables.
func ompalloc(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("ompalloc %v: still running after 2 minutes", args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, out.String(), errb.String()}
}

func TestInfoText(t *testing.T) {
	r := ompalloc(t, nil, "info")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{"Drivers", "host", "Devices", "initial", "Memory spaces", "omp_default_mem_space",
		"Predefined allocators", "omp_default_mem_alloc (default)", "llvm_omp_target_device_mem_alloc",
		"OMP_ALLOCATOR", "RLIMIT_MEMLOCK", "VmLck", "pinned-bytes limit", "NUMA nodes", "huge page sizes", "high_bw:", "large_cap: nodes"} {
		require.Contains(t, r.stdout, want)
	}
	require.NotContains(t, r.stdout+r.stderr, "panic")
}

func infoJSON(t *testing.T, env ...string) (*InfoReport, string) {
	t.Helper()
	r := ompalloc(t, env, "info", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep InfoReport
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep), "stdout must be exactly one JSON object:\n%s", r.stdout)
	return &rep, r.stderr
}

func TestInfoJSON(t *testing.T) {
	rep, _ := infoJSON(t)
	require.Equal(t, InfoSchema, rep.Schema)
	require.Equal(t, runtime.GOOS, rep.OS)
	require.Empty(t, rep.Errors)

	// The host is always there, as the initial device numbered after the
	// accelerators.
	require.Len(t, rep.Devices, rep.NumDevices+1)
	host := rep.Devices[len(rep.Devices)-1]
	require.True(t, host.Initial)
	require.Equal(t, "host", host.Plugin)
	require.Equal(t, rep.NumDevices, host.Number)
	require.Equal(t, rep.NumDevices, rep.InitialDevice)
	require.Greater(t, host.MemoryBytes, uint64(0))
	defaults := 0
	for _, d := range rep.Devices {
		if d.Default {
			defaults++
			require.Equal(t, rep.DefaultDevice, d.Number)
		}
	}
	require.Equal(t, 1, defaults)

	var plugins []string
	for _, d := range rep.Drivers {
		plugins = append(plugins, d.Plugin)
		require.NotEmpty(t, d.Init, "driver %s: an init result or the reason there is none", d.Plugin)
		require.Equal(t, d.Error == "", d.Usable)
	}
	require.Contains(t, plugins, "host")

	require.NotEmpty(t, rep.NUMA.Nodes)
	require.NotEmpty(t, rep.NUMA.HighBwWhy)
	require.NotEmpty(t, rep.NUMA.LargeCap)
	require.Equal(t, numa.Supported(), rep.NUMA.Policies, "memory policies: Linux with mbind (not qemu-user)")
	require.NotEmpty(t, rep.Memspaces[0].Nodes, "the default memory space names its nodes")
	require.NotEmpty(t, rep.Memspaces[0].NodesWhy)

	require.Len(t, rep.Memspaces, 8)
	require.Equal(t, "omp_default_mem_space", rep.Memspaces[0].Name)
	require.EqualValues(t, 99, rep.Memspaces[0].Handle)
	require.Len(t, rep.Allocators, 11)
	require.Equal(t, "omp_default_mem_alloc", rep.Allocators[0].Name)
	require.True(t, rep.Allocators[0].Default)

	require.False(t, rep.OMPAllocator.Set)
	require.Equal(t, "omp_default_mem_alloc", rep.OMPAllocator.Resolved)

	require.NotEmpty(t, rep.Memlock.Soft)
	if runtime.GOOS == "linux" {
		require.GreaterOrEqual(t, rep.Memlock.VmLckBytes, int64(0))
		require.NotEqual(t, "n/a", rep.Memlock.Soft)
	}
}

// The pinned huge page mode is shown as set, and a bad value is warned
// about and shown as the thp it reads as.
func TestInfoHugePages(t *testing.T) {
	for _, tc := range []struct {
		env, mode, warning string
	}{
		{"", "thp", ""},
		{"hugetlb", "hugetlb", ""},
		{"off", "off", ""},
		{"bogus", "thp", `OMPALLOC_HUGEPAGES="bogus": "bogus" is not a huge page mode`},
	} {
		t.Run(tc.mode+"/"+tc.env, func(t *testing.T) {
			rep, stderr := infoJSON(t, "OMPALLOC_HUGEPAGES="+tc.env)
			h := rep.Pinned.HugePages
			require.Equal(t, tc.mode, h.Mode)
			require.Equal(t, tc.env, h.Env)
			require.Zero(t, h.HugeTLBBytes, "info pins nothing")
			if tc.warning == "" {
				require.NotContains(t, stderr, "warning")
			} else {
				require.Contains(t, stderr, tc.warning)
			}
			_, err := os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB")
			require.Equal(t, err == nil, h.Pool, "the 2 MiB pool is reported where sysfs has it")
			require.LessOrEqual(t, h.PoolAvailable, h.PoolFree)
			require.LessOrEqual(t, h.PoolFree, h.PoolTotal)
		})
	}
	r := ompalloc(t, []string{"OMPALLOC_HUGEPAGES=hugetlb"}, "info")
	require.Contains(t, r.stdout, "pinned huge pages")
	require.Contains(t, r.stdout, "hugetlb (OMPALLOC_HUGEPAGES=hugetlb): 0 B in hugetlb pages (not in VmLck), 0 fallbacks")
}

func TestInfoOMPAllocator(t *testing.T) {
	for _, tc := range []struct {
		value, resolved, warning string
	}{
		{"omp_large_cap_mem_alloc", "omp_large_cap_mem_alloc", ""},
		{"omp_default_mem_space:alignment=64,pool_size=1048576", "allocator#", ""},
		{"omp_default_mem_space:alignment=3", "omp_default_mem_alloc", "alignment"},
		{"no_such_allocator", "omp_default_mem_alloc", "no_such_allocator"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			rep, stderr := infoJSON(t, "OMP_ALLOCATOR="+tc.value)
			e := rep.OMPAllocator
			require.True(t, e.Set)
			require.Equal(t, tc.value, e.Value)
			require.Contains(t, e.Resolved, tc.resolved)
			if tc.warning == "" {
				require.Empty(t, e.Warning)
				require.NotContains(t, stderr, "warning")
				return
			}
			require.Contains(t, e.Warning, tc.warning)
			require.Contains(t, e.Warning, "OMP_ALLOCATOR")
			require.Contains(t, stderr, "OMP_ALLOCATOR", "the runtime's own warning")
		})
	}
}

func benchJSON(t *testing.T, args ...string) *BenchReport {
	t.Helper()
	r := ompalloc(t, nil, append([]string{"bench", "--json"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep BenchReport
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep), "stdout must be exactly one JSON object:\n%s", r.stdout)
	require.Equal(t, BenchSchema, rep.Schema)
	// stderr is not a terminal: no bar, but a line per case as it finishes
	// (issue 22: a redirected run printed nothing until the end).
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, len(rep.Results), "one progress line per case:\n%s", r.stderr)
	for i, l := range lines {
		res := rep.Results[i]
		require.True(t, strings.HasPrefix(l, fmt.Sprintf("bench: [%d/%d] %s %s", i+1, len(rep.Results), res.Group, res.Series)), "%q", l)
		require.Contains(t, l, cellText(res))
	}
	return &rep
}

// Each case runs --repeat times: the figure is the median run, the fastest
// and slowest beside it; --quiet prints no progress; a bad --repeat is a
// usage error.
func TestBenchRepeatAndSpread(t *testing.T) {
	testenv.Long(t, "runs the bench")
	rep := benchJSON(t, "--time", "5ms", "--repeat", "3", "--sizes", "64,4096", "--regions", "100")
	require.Equal(t, 3, rep.RunsPerCase)
	require.Equal(t, "quick", rep.Mode)
	timed := 0
	for _, r := range rep.Results {
		if r.Error != "" {
			continue
		}
		if r.Group == "block_memory" {
			require.Equal(t, 1, r.Runs, "a child process per figure: one run")
			continue
		}
		timed++
		require.Equal(t, 3, r.Runs, "%+v", r)
		require.LessOrEqual(t, r.NsMin, r.NsPerOp, "%+v", r)
		require.LessOrEqual(t, r.NsPerOp, r.NsMax, "%+v", r)
		require.Greater(t, r.NsMin, 0.0, "%+v", r)
	}
	require.Greater(t, timed, 10)

	r := ompalloc(t, nil, "bench", "--quiet", "--time", "1ms", "--repeat", "1", "--sizes", "64", "--regions", "100")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "--quiet")
	require.Contains(t, r.stdout, "median of 1 runs")
	require.NotContains(t, r.stdout, "–", "one run: no spread shown")

	r = ompalloc(t, nil, "bench", "--repeat", "0")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--repeat 0: want 1 to 100 runs per case")
}

func TestBenchJSON(t *testing.T) {
	rep := benchJSON(t, "--time", "20ms", "--sizes", "64,4096", "--regions", "100,1000")
	require.Equal(t, (20 * time.Millisecond).Nanoseconds(), rep.TimePerCaseN)
	count, series := map[string]int{}, map[string]int{}
	for _, r := range rep.Results {
		count[r.Group]++
		series[r.Group+"/"+r.Series]++
		switch r.Group {
		case "alloc_free", "lock_regions":
			// These need nothing but the host: they must work here, except
			// that pinning may be refused (RLIMIT_MEMLOCK 0), which must say so.
			if r.Series == "pinned" && r.Error != "" {
				require.Contains(t, r.Error, "cannot pin memory")
				continue
			}
			require.Empty(t, r.Error, "%s %s", r.Group, r.Series)
		case "lock_size":
			if r.Error != "" { // mlock may be refused (RLIMIT_MEMLOCK); it must say so
				require.Contains(t, r.Error, "RLIMIT_MEMLOCK")
				continue
			}
		}
		if r.Group == "block_memory" {
			if r.Series == "libc malloc" && r.Error != "" {
				continue // a libc without malloc_trim says so
			}
			require.Empty(t, r.Error, "%+v", r)
			require.Greater(t, r.BytesPerBlock, float64(r.SizeBytes), "%+v: a block costs more than its size", r)
			require.Less(t, r.BytesPerBlock, 2*float64(r.SizeBytes)+64, "%+v", r)
			continue
		}
		if r.Group == "alloc_goroutines" {
			require.Contains(t, []int64{1, 2, 4, 8, 16}, r.Goroutines)
		}
		if r.Error == "" {
			require.Greater(t, r.NsPerOp, 0.0, "%+v", r)
			require.Greater(t, r.Iterations, 0, "%+v", r)
			require.Less(t, r.NsPerOp, 1e9, "%+v: one operation takes under a second", r)
		}
		if r.Group == "lock_regions" {
			require.Contains(t, []int64{100, 1000}, r.Regions)
		} else {
			require.Contains(t, []int64{64, 4096}, r.SizeBytes)
		}
	}
	require.Equal(t, 3*2, count["alloc_free"], "default, align64, pinned × 2 sizes")
	require.Equal(t, 3, count["alloc_goroutines"], "1, 4, 16 goroutines (1, 2, 4, 8, 16 with --full)")
	require.Equal(t, 2*2, count["block_memory"], "ompalloc, libc malloc × 2 sizes")
	require.GreaterOrEqual(t, count["lock_size"], 2)
	require.Equal(t, 2*2, count["lock_regions"], "hit and lookup × 2 counts")
	skipped := map[string]string{}
	for _, s := range rep.Skipped {
		skipped[s.Group] = s.Reason
	}
	if why, ok := skipped["pin_huge hugetlb"]; ok {
		require.Zero(t, series["pin_huge/hugetlb"])
		require.Contains(t, why, "hugetlb page", "says why")
		delete(skipped, "pin_huge hugetlb")
	} else {
		require.Equal(t, 1, series["pin_huge/hugetlb"], "hugetlb measured where the pool has the pages")
	}
	require.Equal(t, 1, series["pin_huge/4k"])
	require.Equal(t, 1, series["pin_huge/thp"])
	if rep.Device == nil {
		require.Len(t, skipped, 4, "h2d, d2h, small_copy and device_alloc are skipped without an accelerator")
		require.Zero(t, count["h2d"])
	} else {
		require.Equal(t, 3*2, count["h2d"])
		require.Equal(t, 3*2, count["d2h"])
	}
}

// svgDoc checks that data is well-formed XML with an <svg> root in the SVG
// namespace, and counts the elements by name.
func svgDoc(t *testing.T, data []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	counts := map[string]int{}
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				require.Equal(t, "svg", el.Name.Local, "root element")
				require.Equal(t, "http://www.w3.org/2000/svg", el.Name.Space)
				require.Zero(t, counts["svg"], "one root")
			}
			counts[el.Name.Local]++
			depth++
		case xml.EndElement:
			depth--
		}
	}
	require.Zero(t, depth)
	return counts
}

// The transfer groups run on the host device when asked (--device with the
// initial device's number), so this machine exercises them too.
func TestBenchSVG(t *testing.T) {
	testenv.Long(t, "runs the bench")
	info, _ := infoJSON(t)
	svg := filepath.Join(t.TempDir(), "bench.svg")
	r := ompalloc(t, nil, "bench", "--svg", svg, "--time", "10ms", "--sizes", "64,4096",
		"--regions", "100", "--device", fmt.Sprint(info.InitialDevice))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "alloc+free")
	require.Contains(t, r.stdout, "host→device copy bandwidth")
	require.Contains(t, r.stdout, "chart written to "+svg)
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	counts := svgDoc(t, data)
	require.Greater(t, counts["path"]+counts["polyline"], 0)
	require.GreaterOrEqual(t, counts["polyline"], 3, "one line per series with two sizes")
	require.Contains(t, string(data), "block size")
	require.Contains(t, string(data), "H2D pinned")
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string // on stderr for errors, stdout otherwise
	}{
		{nil, 2, "Usage"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"info", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"info", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"bench", "--time", "-1s"}, 2, "--time"},
		{[]string{"bench", "--time", "soon"}, 2, "invalid value"},
		{[]string{"bench", "--sizes", "0"}, 2, "not a size"},
		{[]string{"bench", "--sizes", "64,abc"}, 2, "not a size"},
		{[]string{"bench", "--regions", "-5"}, 2, "not a count"},
		{[]string{"bench", "--device", "99"}, 2, "no such device"},
		{[]string{"help", "nothing"}, 2, "no help"},
		{[]string{"help"}, 0, "ompalloc bench"},
		{[]string{"help", "bench"}, 0, "--sizes"},
		{[]string{"bench", "-h"}, 0, "--regions"},
		{[]string{"--version"}, 0, "ompalloc"},
		{[]string{"version"}, 0, runtime.Version()},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := ompalloc(t, nil, tc.args...)
			require.Equal(t, tc.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			if tc.code != 0 {
				require.Contains(t, r.stderr, tc.says)
				require.Contains(t, r.stderr, "Usage", "usage goes with the error")
				require.Empty(t, r.stdout)
			} else {
				require.Contains(t, r.stdout, tc.says)
			}
		})
	}
}
