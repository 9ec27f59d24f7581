package gpucheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// DryRunEnv switches TestDryRun on: it builds the whole bundle (seven test
// binaries, the CLI, the probe and the pipeline example), too much for every
// `go test ./...`.
const DryRunEnv = "OMPALLOC_GPU_DRYRUN"

// copyDir copies the plain files of src into dst, keeping their modes.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		require.True(t, e.Type().IsRegular(), "%s in the bundle is not a plain file", e.Name())
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		fi, err := e.Info()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), data, fi.Mode().Perm()))
	}
}

// TestDryRun is what a GPU host will do, against the project's fake libcuda
// (two simulated GPUs): build the bundle here, copy only it and the fake
// into an empty directory, and run it there with go and gcc off PATH. The
// run must succeed (status 0, no test failing) and measure h2d and d2h from
// pinned and pageable memory and the driver's peak. On amd64 it does so for
// a GH200/Grace host too: the arm64 bundle and an arm64 fake, under
// qemu-user (skipped, saying why, without it).
func TestDryRun(t *testing.T) {
	if os.Getenv(DryRunEnv) != "1" {
		t.Skipf("set %s=1 to build the GPU bundle and dry-run it (.ci/run does)", DryRunEnv)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH: cannot build the bundle")
	}
	path := sandboxPATH(t, append(hostTools, "ls")...)
	t.Run(runtime.GOARCH, func(t *testing.T) {
		dryRun(t, goBin, path, runtime.GOARCH, fakedrv.Build(t, "fakecuda"), nil)
	})
	t.Run("arm64 under qemu", func(t *testing.T) {
		if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
			t.Skip("the arm64 bundle is dry-run from linux/amd64")
		}
		if st, err := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-aarch64"); err != nil || !strings.HasPrefix(string(st), "enabled") {
			t.Skip("qemu-user's binfmt_misc entry qemu-aarch64 is not enabled (Debian: qemu-user-static binfmt-support)")
		}
		const sysroot = "/usr/aarch64-linux-gnu"
		cc, err := exec.LookPath("aarch64-linux-gnu-gcc")
		if err != nil {
			t.Skip("aarch64-linux-gnu-gcc not installed: no arm64 fake libcuda")
		}
		code, err := fakedrv.Source("fakecuda")
		require.NoError(t, err)
		dir := t.TempDir()
		src, so := filepath.Join(dir, "fakecuda.c"), filepath.Join(dir, "fakecuda.so")
		require.NoError(t, os.WriteFile(src, code, 0o644))
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-o", so, src).CombinedOutput()
		require.NoError(t, err, "%s", out)
		dryRun(t, goBin, path, "arm64", so, []string{"QEMU_LD_PREFIX=" + sysroot})
	})
}

// dryRun builds the bundle for arch, runs it with lib as libcuda in a
// directory of its own, and checks the results.
func dryRun(t *testing.T, goBin, path, arch, fake string, env []string) {
	built := filepath.Join(t.TempDir(), "bundle")
	cmd := exec.Command("bash", script, "build", built)
	cmd.Env = append(os.Environ(), "GOARCH="+arch, "PATH="+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build: %s", out)

	// The GPU host: the bundle, the driver, nothing else.
	host := t.TempDir()
	bundle := filepath.Join(host, "gpu")
	copyDir(t, built, bundle)
	lib := filepath.Join(host, "libcuda.so.1")
	data, err := os.ReadFile(fake)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lib, data, 0o755))
	tmp := filepath.Join(host, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))

	// The host's ldconfig knows the driver (no OMPALLOC_CUDA_LIBRARY, as on
	// a real GPU host), after a 32-bit compat entry the script must pass over.
	ldArch := map[string]string{"amd64": "x86-64", "arm64": "AArch64"}[arch]
	ldPath := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.Mkdir(ldPath, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ldPath, "ldconfig"), []byte("#!"+filepath.Join(path, "bash")+"\ncat <<'EOF'\n"+
		"2 libs found in cache `/etc/ld.so.cache'\n\tlibcuda.so.1 (libc6) => /nonexistent/i386/libcuda.so.1\n"+
		"\tlibcuda.so.1 (libc6,"+ldArch+") => "+lib+"\nEOF\n"), 0o755))

	resOut := filepath.Join(host, "out")
	run := exec.Command(filepath.Join(path, "bash"), filepath.Join(bundle, "gpu-check.sh"), "run", bundle, resOut)
	run.Dir = host
	// The user's settings that change the library the most (a GPU
	// container's OMPALLOC_PINNED_LIMIT=0 among them) are exported: the
	// test binaries must not depend on them.
	run.Env = append(append([]string{"PATH=" + path + string(os.PathListSeparator) + ldPath, "HOME=" + host, "TMPDIR=" + tmp,
		"BENCH_TIME=5ms", "BENCH_SIZES=4K,1M,64M", "PROBE_SIZE=4M"}, testenv.Hostile...), env...)
	out, err = run.CombinedOutput()
	logs, _ := filepath.Glob(filepath.Join(resOut, "test-*.log"))
	for _, l := range logs {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), "--- FAIL") {
			t.Logf("%s:\n%s", filepath.Base(l), b)
		}
	}
	require.NoError(t, err, "run: %s", out)

	var s Summary
	data, err = os.ReadFile(filepath.Join(resOut, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &s), "%s", data)
	require.Equal(t, 0, s.Status, "%s", data)
	require.Zero(t, s.TestsFailed)
	require.Empty(t, s.PackagesFailed)
	require.Zero(t, s.BenchErrors)
	require.Equal(t, lib, s.Libcuda, "found through ldconfig")
	require.Equal(t, "measured", s.Probe)
	require.NotNil(t, s.GPUNode, "the GPU's node from bench.json (-1: unknown)")
	require.Len(t, s.HostNodes, 4, "where each transfer series' buffer was: %v", s.HostNodes)
	require.NotNil(t, s.DeviceAlloc, "the device pool figure: %s", data)
	require.Equal(t, "driver", s.DeviceAlloc.DevicePool, "the fake libcuda's stream-ordered pool")
	require.Greater(t, s.DeviceAlloc.PoolNs, 0.0)
	require.Greater(t, s.DeviceAlloc.DriverNs, 0.0)
	t.Logf("device alloc+free of 1 MiB on the fake libcuda: pool %.0f ns, cuMemAlloc+cuMemFree %.0f ns", s.DeviceAlloc.PoolNs, s.DeviceAlloc.DriverNs)
	require.Empty(t, s.TimedOut)
	require.Equal(t, arch, s.Arch, "the bundle's own architecture ran")
	require.Greater(t, s.TestsPassed, 50, "the bundle's tests ran")
	require.Len(t, s.Goals, 2)
	// The pipeline example ran on the fake GPU 0 (OMP_DEFAULT_DEVICE=1 of
	// the hostile settings overridden) with pinned buffers, and the fake
	// times events: every figure is there but the bench's 4 MiB driver
	// peak (BENCH_SIZES has no 4M).
	require.Equal(t, "measured", s.Pipeline)
	var pipe struct {
		Device      string   `json:"device"`
		Pinned      bool     `json:"pinned"`
		Overlap     *float64 `json:"overlap"`
		H2D         float64  `json:"h2d_gb_per_s"`
		Peak        float64  `json:"peak_h2d_gb_per_s"`
		OfPeak      float64  `json:"of_peak"`
		DriverPeak  *float64 `json:"bench_driver_peak_gb_per_s"`
		PipelinedNs int64    `json:"pipelined_ns"`
	}
	require.NoError(t, json.Unmarshal(s.PipelineResult, &pipe), "%s", s.PipelineResult)
	require.Contains(t, pipe.Device, "device 0 (cuda")
	require.True(t, pipe.Pinned)
	require.NotNil(t, pipe.Overlap)
	require.Positive(t, pipe.PipelinedNs)
	require.Positive(t, pipe.H2D)
	require.Positive(t, pipe.Peak)
	require.Positive(t, pipe.OfPeak)
	require.Nil(t, pipe.DriverPeak)

	tests, err := os.ReadFile(filepath.Join(resOut, "tests.log"))
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(tests)), "\n"), 7, "one line per package:\n%s", tests)
	// The fake-driver tests need a compiler, which the host lacks: they
	// skip and say so; internal/plugin/cuda's real-driver test runs on the "real"
	// library, here the fake.
	cuda, err := os.ReadFile(filepath.Join(resOut, "test-internal_plugin_cuda.log"))
	require.NoError(t, err)
	require.Contains(t, string(cuda), "--- PASS: TestRealDriver")
	require.Contains(t, string(cuda), "no C compiler")

	var rep benchReport
	data, err = os.ReadFile(filepath.Join(resOut, "bench.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &rep))
	// The hugetlb series of pin_huge needs pages the host reserved
	// (nr_hugepages): their absence says something about this machine's
	// pool, not the bundle, and bench says so; every other series must run.
	for _, sk := range rep.Skipped {
		if sk.Group == "pin_huge hugetlb" {
			continue
		}
		require.Fail(t, "a bench series skipped", "%+v", sk)
	}
	seen := map[string]int{}
	for _, r := range rep.Results {
		if r.Group != "h2d" && r.Group != "d2h" {
			continue
		}
		require.Empty(t, r.Error, "%+v", r)
		require.Greater(t, r.GBPerS, 0.0, "%+v", r)
		if r.Series != "driver peak" {
			require.Greater(t, r.OfPeak, 0.0, "ours/peak: %+v", r)
		}
		seen[r.Group+"/"+r.Series]++
	}
	for _, k := range []string{"h2d/pinned", "h2d/pageable", "d2h/pinned", "d2h/pageable", "h2d/driver peak", "d2h/driver peak"} {
		require.Equal(t, 3, seen[k], "%s at 4K, 1M and 64M", k)
	}
	require.NotEqual(t, "unmeasured", rep.Goals[0].Status, "64 MiB reached: the peak goal is judged: %+v", rep.Goals[0])

	var info struct {
		Drivers []struct {
			Plugin, Library string
			Usable          bool
		} `json:"drivers"`
		NumDevices int `json:"num_devices"`
	}
	data, err = os.ReadFile(filepath.Join(resOut, "info.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &info))
	require.Equal(t, 2, info.NumDevices, "the fake's two GPUs")
	for _, d := range info.Drivers {
		if d.Plugin == "cuda" {
			require.Equal(t, lib, d.Library)
			require.True(t, d.Usable)
		}
	}
	_, err = os.Stat(filepath.Join(resOut, "bench.svg"))
	require.NoError(t, err)
	for _, series := range []string{"pageable", "registered", "pinned", "driver peak"} {
		require.NotEmpty(t, rep.Device.HostNodes[series], "%s: where its buffer is: %+v", series, rep.Device)
	}

	// The probe asked the fake every question; the JSON is valid and each
	// answer is an answer or says why it was not asked, never an error.
	var pr probeReport
	data, err = os.ReadFile(filepath.Join(resOut, "probe.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &pr), "%s", data)
	require.Equal(t, "ompalloc-gpuprobe/1", pr.Schema)
	require.Equal(t, lib, pr.Library)
	require.Equal(t, 2, pr.Devices)
	require.Empty(t, pr.Error)
	var names []string
	for _, q := range pr.Questions {
		names = append(names, q.Name)
		require.Empty(t, q.Error, "%+v", q)
		require.True(t, q.Answer != "" || q.Skipped != "", "%+v", q)
	}
	require.Equal(t, probeQuestions, names)
}

// probeQuestions are the probe's questions, in order (issue 19).
var probeQuestions = []string{"mixed_range_copy", "adjacent_registrations_copy", "shared_page_registrations",
	"portable_dtoh_async", "release_while_busy", "caller_context", "node_bandwidth"}

type probeReport struct {
	Schema    string `json:"schema"`
	Library   string `json:"library"`
	Devices   int    `json:"devices"`
	Error     string `json:"error"`
	Questions []struct {
		Name    string         `json:"name"`
		Answer  string         `json:"answer"`
		Skipped string         `json:"skipped"`
		Error   string         `json:"error"`
		Results map[string]any `json:"results"`
	} `json:"questions"`
}
