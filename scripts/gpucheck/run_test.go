package gpucheck

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// script is the script under test, read by the test process itself so that
// go test's cache notices edits.
const script = "../gpu-check.sh"

// Summary is OUT/summary.json.
type Summary struct {
	Libcuda        string            `json:"libcuda"`
	Arch           string            `json:"arch"`
	TestsPassed    int               `json:"tests_passed"`
	TestsFailed    int               `json:"tests_failed"`
	TestsSkipped   int               `json:"tests_skipped"`
	PackagesFailed []string          `json:"packages_failed"`
	BenchErrors    int               `json:"bench_errors"`
	GPUNode        *int              `json:"gpu_node"`
	HostNodes      map[string]string `json:"host_nodes"`
	DeviceAlloc    *DeviceAlloc      `json:"device_alloc"`
	Goals          []json.RawMessage `json:"goals"`
	Probe          string            `json:"probe"`
	Torch          string            `json:"torch"`
	Pipeline       string            `json:"pipeline"`
	PipelineResult json.RawMessage   `json:"pipeline_result"`
	TimedOut       []string          `json:"timed_out"`
	Status         int               `json:"status"`
}

// DeviceAlloc is summary.json's device_alloc: 1 MiB device alloc+free
// through the device pool and through cuMemAlloc+cuMemFree.
type DeviceAlloc struct {
	DevicePool string  `json:"device_pool"`
	PoolNs     float64 `json:"pool_ns"`
	DriverNs   float64 `json:"driver_ns"`
}

// The parts of `ompalloc bench --json` the script and these tests read,
// in the CLI's field order (goals between skipped and elapsed_ns).
type benchResult struct {
	Group     string  `json:"group"`
	Series    string  `json:"series"`
	SizeBytes int64   `json:"size_bytes,omitempty"`
	NsPerOp   float64 `json:"ns_per_op"`
	GBPerS    float64 `json:"gb_per_s,omitempty"`
	OfPeak    float64 `json:"of_peak,omitempty"`
	Error     string  `json:"error,omitempty"`
}

type benchGoal struct {
	Goal   string `json:"goal"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// benchDevice is the bench's device object, in the CLI's field order.
type benchDevice struct {
	Number     int               `json:"number"`
	NUMANode   int               `json:"numa_node"`
	DevicePool string            `json:"device_pool,omitempty"`
	HostNodes  map[string]string `json:"host_nodes,omitempty"`
}

type benchReport struct {
	Arch    string        `json:"arch"`
	Device  *benchDevice  `json:"device"`
	Results []benchResult `json:"results"`
	Skipped []struct {
		Group  string `json:"group"`
		Reason string `json:"reason"`
	} `json:"skipped"`
	Goals     []benchGoal `json:"goals"`
	ElapsedNs int64       `json:"elapsed_ns"`
}

// sandboxPATH makes a directory of links to the tools a GPU host without a
// toolchain has, and nothing else: no go, no gcc, no cc.
func sandboxPATH(t *testing.T, tools ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found: the sandbox needs it", tool)
		}
		require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
	}
	out, err := exec.Command(filepath.Join(bin, "bash"), "-c", "PATH="+bin+"; command -v go gcc cc").CombinedOutput()
	require.Error(t, err, "go or a C compiler in the sandbox: %s", out)
	return bin
}

// hostTools are what gpu-check.sh run needs on the GPU host.
var hostTools = []string{"bash", "env", "mkdir", "mktemp", "rm", "cat", "grep", "sed", "awk", "basename", "dirname", "timeout", "tail", "tr"}

// stubBundle writes stand-ins for the bundle: test binaries printing the
// given go test output with the given status, and an ompalloc whose info
// and bench print canned JSON and record what they saw in probe.
func stubBundle(t *testing.T, tests map[string]string, rc map[string]int, bench []byte) (bundle, probe string) {
	t.Helper()
	bundle, probe = t.TempDir(), t.TempDir()
	for name, out := range tests {
		body := "#!/usr/bin/env bash\npwd >" + filepath.Join(probe, name+".cwd") + "\nls -A >>" + filepath.Join(probe, name+".cwd") +
			"\nenv >" + filepath.Join(probe, name+".env") + "\ncat <<'EOF'\n" + out + "\nEOF\nexit " + string(rune('0'+rc[name])) + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(bundle, name+".test"), []byte(body), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(probe, "bench.json"), bench, 0o644))
	cli := "#!/usr/bin/env bash\ncase $1 in\n" +
		"info) printf '{\\n  \"arch\": \"arm64\",\\n  \"cpus\": 1\\n}\\n' ;;\n" +
		"bench) echo \"$@\" >" + filepath.Join(probe, "bench.args") + "; env >" + filepath.Join(probe, "bench.env") +
		"; cat " + filepath.Join(probe, "bench.json") + " ;;\nesac\n"
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "ompalloc"), []byte(cli), 0o755))
	return bundle, probe
}

func benchJSON(t *testing.T, results []benchResult) []byte {
	t.Helper()
	rep := benchReport{Arch: "arm64", Results: results, Device: &benchDevice{Number: 0, NUMANode: 1,
		HostNodes: map[string]string{"driver peak": "1", "pageable": "1", "pinned": "1", "registered": "0-1"}, DevicePool: "driver"}, Goals: []benchGoal{
		{Goal: "peak", Status: "met", Detail: "lowest of 4: 97%"}, {Goal: "staging", Status: "missed", Detail: "1.2"},
	}}
	b, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// runScript runs `gpu-check.sh run BUNDLE OUT` with only env (and the
// sandbox PATH) and returns the summary, the exit status and the output.
func runScript(t *testing.T, path, bundle string, env ...string) (*Summary, int, string) {
	t.Helper()
	_, err := os.ReadFile(script)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(filepath.Join(path, "bash"), script, "run", bundle, out)
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + t.TempDir()}, env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, buf.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		return nil, code, buf.String()
	}
	var s Summary
	require.NoError(t, json.Unmarshal(data, &s), "summary.json: %s", data)
	return &s, code, buf.String()
}

func TestRunSummary(t *testing.T) {
	path := sandboxPATH(t, hostTools...)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	pass := "=== RUN   TestA\n--- PASS: TestA (0.00s)\n    --- PASS: TestA/sub (0.00s)\n--- SKIP: TestB (0.00s)\nPASS"
	fail := "--- PASS: TestC (0.00s)\n--- FAIL: TestD (0.00s)\nFAIL"
	transfers := []benchResult{
		{Group: "alloc_free", Series: "pinned", SizeBytes: 64, NsPerOp: 50},
		{Group: "h2d", Series: "pinned", SizeBytes: 1 << 30, NsPerOp: 2e7, GBPerS: 53, OfPeak: 0.98},
		{Group: "d2h", Series: "pageable", SizeBytes: 1 << 30, NsPerOp: 6e7, GBPerS: 17, OfPeak: 0.3},
		{Group: "h2d", Series: "driver peak", SizeBytes: 1 << 30, NsPerOp: 2e7, GBPerS: 54},
		{Group: "device_alloc", Series: "pool", SizeBytes: 1 << 20, NsPerOp: 2500.5},
		{Group: "device_alloc", Series: "driver", SizeBytes: 1 << 20, NsPerOp: 90000},
	}
	withErr := func(group string) []benchResult {
		r := append([]benchResult(nil), transfers...)
		return append(r, benchResult{Group: group, Series: "pinned", SizeBytes: 4096, Error: "ompalloc: pinned: failed"})
	}
	for _, tc := range []struct {
		name        string
		tests       map[string]string
		rc          map[string]int
		results     []benchResult
		status      int
		passed      int
		failedPkgs  []string
		benchErrors int
	}{
		{"healthy", map[string]string{"alloc": pass, "internal_plugin_cuda": pass}, nil, transfers, 0, 2, []string{}, 0},
		{"a failing test binary", map[string]string{"alloc": pass, "target": fail}, map[string]int{"target": 1}, transfers, 1, 2, []string{"target"}, 0},
		{"a failed transfer", map[string]string{"alloc": pass}, nil, withErr("h2d"), 1, 1, []string{}, 1},
		{"a failed small copy", map[string]string{"alloc": pass}, nil, withErr("small_copy"), 1, 1, []string{}, 1},
		{"a failed lock of host memory is no GPU failure", map[string]string{"alloc": pass}, nil, withErr("lock_size"), 0, 1, []string{}, 0},
		{"no transfers measured", map[string]string{"alloc": pass}, nil, transfers[:1], 1, 1, []string{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, probe := stubBundle(t, tc.tests, tc.rc, benchJSON(t, tc.results))
			s, code, out := runScript(t, path, bundle, "OMPALLOC_CUDA_LIBRARY="+lib, "BENCH_TIME=5ms", "BENCH_SIZES=4K,1G")
			require.NotNil(t, s, out)
			require.Equal(t, tc.status, s.Status, out)
			require.Equal(t, tc.status, code, "exit status is the summary's")
			require.Equal(t, lib, s.Libcuda)
			require.Equal(t, "arm64", s.Arch, "from info.json")
			require.Equal(t, tc.passed, s.TestsPassed, "top-level tests only")
			require.Equal(t, tc.status == 1 && len(tc.failedPkgs) > 0, s.TestsFailed > 0)
			require.Equal(t, tc.failedPkgs, s.PackagesFailed)
			require.Equal(t, tc.benchErrors, s.BenchErrors)
			require.Len(t, s.Goals, 2, "the bench's goals, verbatim")
			require.Equal(t, "absent: no python3 with torch", s.Torch)
			require.NotNil(t, s.GPUNode)
			require.Equal(t, 1, *s.GPUNode, "the GPU's node, from bench.json")
			require.Equal(t, map[string]string{"driver peak": "1", "pageable": "1", "pinned": "1", "registered": "0-1"}, s.HostNodes,
				"where each series' buffer was")
			if len(tc.results) > 1 {
				require.Equal(t, &DeviceAlloc{DevicePool: "driver", PoolNs: 2500.5, DriverNs: 90000}, s.DeviceAlloc, "the device pool figure, from bench.json")
			} else {
				require.Nil(t, s.DeviceAlloc, "no device_alloc measured: null")
			}
			var g benchGoal
			require.NoError(t, json.Unmarshal(s.Goals[0], &g))
			require.Equal(t, benchGoal{Goal: "peak", Status: "met", Detail: "lowest of 4: 97%"}, g)

			benchEnv, err := os.ReadFile(filepath.Join(probe, "bench.env"))
			require.NoError(t, err)
			require.Contains(t, "\n"+string(benchEnv), "\nOMPALLOC_PINNED_LIMIT=0\n", "the bench runs without ompalloc's pinned cap")
			require.Contains(t, "\n"+string(benchEnv), "\nOMPALLOC_CUDA_LIBRARY="+lib+"\n")
			args, err := os.ReadFile(filepath.Join(probe, "bench.args"))
			require.NoError(t, err)
			require.Contains(t, string(args), "--json")
			require.Contains(t, string(args), "--full")
			require.Contains(t, string(args), "--time 5ms --repeat 3 --sizes 4K,1G")
			for name := range tc.tests {
				env, err := os.ReadFile(filepath.Join(probe, name+".env"))
				require.NoError(t, err)
				require.Contains(t, "\n"+string(env), "\nOMPALLOC_REAL_CUDA="+lib+"\n", "the real-driver tests use the same library")
				if name == "alloc" {
					require.Contains(t, "\n"+string(env), "\nOMP_DEFAULT_DEVICE=initial\n", "alloc's default device is the host")
				} else {
					require.NotContains(t, "\n"+string(env), "\nOMP_DEFAULT_DEVICE=initial\n", "the GPU is the default device")
				}
				cwd, err := os.ReadFile(filepath.Join(probe, name+".cwd"))
				require.NoError(t, err)
				lines := strings.Split(strings.TrimSpace(string(cwd)), "\n")
				require.Len(t, lines, 1, "run from an empty directory: %q", cwd)
				require.NotEqual(t, bundle, lines[0])
			}
		})
	}
}

func TestRunNeedsADriver(t *testing.T) {
	path := sandboxPATH(t, hostTools...) // no ldconfig: nothing to find libcuda with
	bundle, _ := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA"}, nil, benchJSON(t, nil))
	s, code, out := runScript(t, path, bundle)
	require.Nil(t, s)
	require.Equal(t, 1, code)
	require.Contains(t, out, "no libcuda.so.1")
	require.Contains(t, out, "set OMPALLOC_CUDA_LIBRARY")

	s, code, out = runScript(t, path, filepath.Join(t.TempDir(), "missing"), "OMPALLOC_CUDA_LIBRARY=/nonexistent")
	require.Nil(t, s)
	require.Equal(t, 1, code)
	require.Contains(t, out, "no bundle at")
}

// writeExe writes an executable script.
func writeExe(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte("#!/usr/bin/env bash\n"+body), 0o755))
}

// Without OMPALLOC_CUDA_LIBRARY the script asks `ldconfig -p`, and takes
// the entry of the bundle's architecture: a 32-bit compat library listed
// first is passed over.
func TestRunFindsLibcudaThroughLdconfig(t *testing.T) {
	path := sandboxPATH(t, hostTools...)
	libs := t.TempDir()
	for _, l := range []string{"i386", "x86_64", "aarch64"} {
		require.NoError(t, os.WriteFile(filepath.Join(libs, l+"-libcuda.so.1"), nil, 0o644))
	}
	writeExe(t, filepath.Join(path, "ldconfig"), "[[ $1 == -p ]] || exit 1\ncat <<'EOF'\n3 libs found in cache `/etc/ld.so.cache'\n"+
		"\tlibcudart.so.12 (libc6,x86-64) => /nowhere/libcudart.so.12\n"+
		"\tlibcuda.so.1 (libc6) => "+libs+"/i386-libcuda.so.1\n"+
		"\tlibcuda.so.1 (libc6,x86-64) => "+libs+"/x86_64-libcuda.so.1\n"+
		"\tlibcuda.so.1 (libc6,AArch64) => "+libs+"/aarch64-libcuda.so.1\nEOF\n")
	for _, tc := range []struct{ build, want string }{
		{"arch linux/amd64\n", "x86_64"}, {"arch linux/arm64\n", "aarch64"}, {"", "x86_64"},
	} {
		bundle, probe := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA"}, nil, benchJSON(t, nil))
		if tc.build != "" {
			require.NoError(t, os.WriteFile(filepath.Join(bundle, "BUILD"), []byte(tc.build), 0o644))
		}
		s, _, out := runScript(t, path, bundle)
		require.NotNil(t, s, out)
		want := filepath.Join(libs, tc.want+"-libcuda.so.1")
		require.Equal(t, want, s.Libcuda, "%q", tc.build)
		env, err := os.ReadFile(filepath.Join(probe, "alloc.env"))
		require.NoError(t, err)
		require.Contains(t, "\n"+string(env), "\nOMPALLOC_REAL_CUDA="+want+"\n")
	}
}

// Every step runs under timeout: a bench that hangs is stopped, named in
// timed_out, and fails the run; the summary is still written.
func TestRunTimesOut(t *testing.T) {
	path := sandboxPATH(t, append(hostTools, "sleep")...)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	bundle, _ := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA"}, nil, benchJSON(t, nil))
	writeExe(t, filepath.Join(bundle, "ompalloc"), "case $1 in\ninfo) echo '{}' ;;\nbench) sleep 60 ;;\nesac\n")
	start := time.Now()
	s, code, out := runScript(t, path, bundle, "OMPALLOC_CUDA_LIBRARY="+lib, "BENCH_TIMEOUT=1")
	require.Less(t, time.Since(start), 30*time.Second, "the bench was stopped")
	require.NotNil(t, s, out)
	require.Equal(t, 1, code)
	require.Equal(t, 1, s.Status)
	require.Equal(t, []string{"bench"}, s.TimedOut)
	require.Contains(t, out, "ran out of time: bench")
}

// The probe step: gpuprobe's JSON goes to OUT/probe.json, `probe` runs it
// alone (no test binaries needed), and `run` reports it in the summary; a
// probe that fails fails the run.
func TestRunProbe(t *testing.T) {
	path := sandboxPATH(t, hostTools...)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	good := "while (($#)); do case $1 in -o) o=$2; shift ;; -lib) l=$2; shift ;; -size) z=$2; shift ;; esac; shift; done\n" +
		"printf '{\"schema\":\"ompalloc-gpuprobe/1\",\"library\":\"%s\",\"size\":\"%s\",\"questions\":[]}\\n' \"$l\" \"$z\" >\"$o\"\n"
	for _, tc := range []struct {
		name, body, probe string
		status            int
	}{
		{"answers", good, "measured", 0},
		{"fails", "echo 'gpuprobe: cuInit: CUDA_ERROR_NO_DEVICE' >&2; exit 1\n", "failed: gpuprobe: cuInit: CUDA_ERROR_NO_DEVICE", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, _ := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA"}, nil, benchJSON(t, []benchResult{
				{Group: "h2d", Series: "pinned", SizeBytes: 1 << 30, NsPerOp: 2e7, GBPerS: 53, OfPeak: 0.98}}))
			writeExe(t, filepath.Join(bundle, "gpuprobe"), tc.body)
			s, code, out := runScript(t, path, bundle, "OMPALLOC_CUDA_LIBRARY="+lib, "PROBE_SIZE=4M")
			require.NotNil(t, s, out)
			require.Equal(t, tc.probe, s.Probe)
			require.Equal(t, tc.status, s.Status)
			require.Equal(t, tc.status, code)

			// probe alone: a bundle with only the probe will do.
			only := t.TempDir()
			writeExe(t, filepath.Join(only, "gpuprobe"), tc.body)
			res := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command(filepath.Join(path, "bash"), script, "probe", only, res)
			cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), "OMPALLOC_CUDA_LIBRARY=" + lib}
			o, err := cmd.CombinedOutput()
			if tc.status != 0 {
				require.Error(t, err, "%s", o)
				return
			}
			require.NoError(t, err, "%s", o)
			var p struct{ Schema, Library, Size string }
			data, err := os.ReadFile(filepath.Join(res, "probe.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(data, &p), "%s", data)
			require.Equal(t, "ompalloc-gpuprobe/1", p.Schema)
			require.Equal(t, lib, p.Library)
			require.Equal(t, "256M", p.Size, "the default size")
		})
	}
}

// The pipeline example: its result line goes to OUT/pipeline.json and the
// summary, with the bench's h2d driver peak at the batch size added where
// the bench measured that size; a pipeline that fails, or prints no result
// line, fails the run; a bundle without it (an older one) is reported so.
func TestRunPipeline(t *testing.T) {
	path := sandboxPATH(t, hostTools...)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	const result = `{"device":"device 0 (cuda NVIDIA H200)","pinned":true,"batches":16,"batch_bytes":4194304,"serial_ns":9000000,` +
		`"pipelined_ns":6000000,"overlap":0.3333,"throughput_gb_per_s":11.18,"h2d_gb_per_s":40,"peak_h2d_gb_per_s":50,"of_peak":0.8}`
	at4M := benchResult{Group: "h2d", Series: "driver peak", SizeBytes: 4 << 20, NsPerOp: 8e4, GBPerS: 50}
	pinned := benchResult{Group: "h2d", Series: "pinned", SizeBytes: 4 << 20, NsPerOp: 8e4, GBPerS: 49, OfPeak: 0.98}
	for _, tc := range []struct {
		name, body string
		bench      []benchResult
		pipeline   string
		status     int
		driverPeak float64 // 0: absent
	}{
		{"with the bench's peak at its size", "echo 'device: x'\necho 'pipeline: " + result + "'\necho released\n",
			[]benchResult{pinned, at4M}, "measured", 0, 50},
		{"without it", "echo 'pipeline: " + result + "'\n", []benchResult{pinned}, "measured", 0, 0},
		{"fails", "echo 'log.Fatal: cuMemcpyHtoDAsync: CUDA_ERROR_ILLEGAL_ADDRESS' >&2\nexit 1\n", []benchResult{pinned},
			"failed: log.Fatal: cuMemcpyHtoDAsync: CUDA_ERROR_ILLEGAL_ADDRESS", 1, 0},
		{"no result line", "echo released\n", []benchResult{pinned}, "failed: no result line in pipeline.log", 1, 0},
		{"absent", "", []benchResult{pinned}, "absent: no pipeline in the bundle", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, _ := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA"}, nil, benchJSON(t, tc.bench))
			envFile := filepath.Join(t.TempDir(), "pipeline.env")
			if tc.body != "" {
				writeExe(t, filepath.Join(bundle, "pipeline"), "env >"+envFile+"\n"+tc.body)
			}
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command(filepath.Join(path, "bash"), script, "run", bundle, out)
			cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), "OMPALLOC_CUDA_LIBRARY=" + lib, "OMP_DEFAULT_DEVICE=1"}
			o, _ := cmd.CombinedOutput()
			data, err := os.ReadFile(filepath.Join(out, "summary.json"))
			require.NoError(t, err, "%s", o)
			var s Summary
			require.NoError(t, json.Unmarshal(data, &s), "%s", data)
			require.Equal(t, tc.pipeline, s.Pipeline, "%s", o)
			require.Equal(t, tc.status, s.Status, "%s", data)
			if tc.pipeline != "measured" {
				require.Equal(t, "null", string(s.PipelineResult))
				return
			}
			env, err := os.ReadFile(envFile)
			require.NoError(t, err)
			require.Contains(t, "\n"+string(env), "\nOMP_DEFAULT_DEVICE=0\n", "the GPU, whatever the user's default")
			require.Contains(t, "\n"+string(env), "\nOMPALLOC_PINNED_LIMIT=0\n", "no pinned cap, as the bench")
			file, err := os.ReadFile(filepath.Join(out, "pipeline.json"))
			require.NoError(t, err)
			require.JSONEq(t, string(file), string(s.PipelineResult), "the summary embeds pipeline.json")
			var r map[string]any
			require.NoError(t, json.Unmarshal(file, &r), "%s", file)
			require.Equal(t, 0.3333, r["overlap"])
			require.Equal(t, 40.0, r["h2d_gb_per_s"])
			require.Equal(t, 0.8, r["of_peak"], "the example's own peak")
			if tc.driverPeak == 0 {
				require.NotContains(t, r, "bench_driver_peak_gb_per_s", "the bench measured no 4 MiB driver peak")
				return
			}
			require.Equal(t, tc.driverPeak, r["bench_driver_peak_gb_per_s"])
			require.Equal(t, 0.8, r["of_driver_peak"])
		})
	}
}
