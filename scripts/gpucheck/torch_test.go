package gpucheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const torchScript = "../torch-peak.py"

// stubTorch is a torch module that records what torch-peak.py does with it:
// which tensors it copies between, how, and when it synchronizes. It keeps
// PyTorch's rule that a non_blocking copy from pageable memory is not
// asynchronous, so the script must pin.
const stubTorch = `
import atexit, json, os
__version__ = "0.0+stub"
uint8 = "uint8"
_log = []
class _Cuda:
    def is_available(self): return os.environ.get("STUB_CUDA", "1") == "1"
    def get_device_name(self, i): return "Stub GPU %d" % i
    def synchronize(self): _log.append(["sync"])
cuda = _Cuda()
class Tensor:
    def __init__(self, n, device="cpu", pinned=False):
        self.n, self.device, self.pinned = n, device, pinned
    def pin_memory(self):
        assert self.device == "cpu"
        return Tensor(self.n, "cpu", True)
    def __getitem__(self, sl):
        return Tensor(len(range(*sl.indices(self.n))), self.device, self.pinned)
    def copy_(self, src, non_blocking=False):
        assert src.n == self.n
        _log.append(["copy", src.device, self.device, src.pinned or self.pinned, non_blocking, self.n])
        return self
def empty(n, dtype=None, device="cpu"):
    return Tensor(n, device)
@atexit.register
def _dump():
    with open(os.environ["STUB_LOG"], "w") as f:
        json.dump(_log, f)
`

// python returns the real python3 binary (not a pyenv shim), skipping
// without one new enough for the script.
func python(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; assert sys.version_info >= (3, 9); print(sys.executable)").Output()
	if err != nil {
		t.Skipf("no python3 >= 3.9: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func stubModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "torch"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "torch", "__init__.py"), []byte(stubTorch), 0o644))
	return dir
}

type torchReport struct {
	Schema  string `json:"schema"`
	Torch   string `json:"torch"`
	Device  string `json:"device"`
	Error   string `json:"error"`
	Results []struct {
		Group      string  `json:"group"`
		Series     string  `json:"series"`
		SizeBytes  int64   `json:"size_bytes"`
		GBPerS     float64 `json:"gb_per_s"`
		Iterations int     `json:"iterations"`
	} `json:"results"`
}

func TestTorchPeak(t *testing.T) {
	py := python(t)
	mod := stubModule(t)
	log := filepath.Join(t.TempDir(), "log.json")
	run := func(env []string, args ...string) ([]byte, error) {
		cmd := exec.Command(py, append([]string{torchScript}, args...)...)
		cmd.Env = append([]string{"PYTHONPATH=" + mod, "STUB_LOG=" + log}, env...)
		return cmd.Output()
	}

	out, err := run(nil, "4K,1MiB", "20ms")
	require.NoError(t, err, "%s", out)
	var rep torchReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	require.Equal(t, "ompalloc-torch/1", rep.Schema)
	require.Equal(t, "0.0+stub", rep.Torch)
	require.Equal(t, "Stub GPU 0", rep.Device)
	var got []string
	for _, r := range rep.Results {
		require.Equal(t, "torch pinned", r.Series)
		require.Greater(t, r.GBPerS, 0.0)
		require.GreaterOrEqual(t, r.Iterations, 1)
		got = append(got, r.Group+"/"+map[int64]string{4 << 10: "4K", 1 << 20: "1M"}[r.SizeBytes])
	}
	require.Equal(t, []string{"h2d/4K", "h2d/1M", "d2h/4K", "d2h/1M"}, got)

	data, err := os.ReadFile(log)
	require.NoError(t, err)
	var events [][]any
	require.NoError(t, json.Unmarshal(data, &events))
	copies := 0
	for i, e := range events {
		if e[0] != "copy" {
			continue
		}
		copies++
		require.Equal(t, true, e[3], "between pinned host memory and the device: %v", e)
		require.Equal(t, true, e[4], "non_blocking: %v", e)
		require.Contains(t, [][]any{{"cpu", "cuda"}, {"cuda", "cpu"}}, []any{e[1], e[2]}, "%v", e)
		require.Less(t, i+1, len(events))
		require.Equal(t, []any{"sync"}, events[i+1], "each copy is waited for")
	}
	require.Greater(t, copies, 4)

	out, err = run([]string{"STUB_CUDA=0"}, "default", "1ms")
	require.Error(t, err)
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	require.Equal(t, "torch.cuda.is_available() is False", rep.Error)

	for _, bad := range [][]string{{"4X", "1ms"}, {"4K", "fast"}, {"0", "1ms"}} {
		_, err = run(nil, bad...)
		require.Error(t, err, "%v", bad)
	}
}

// gpu-check.sh runs torch-peak.py where python3 has torch, and reports
// what came of it without letting it change the status.
func TestRunWithTorch(t *testing.T) {
	py := python(t)
	mod := stubModule(t)
	path := sandboxPATH(t, hostTools...)
	require.NoError(t, os.Symlink(py, filepath.Join(path, "python3")))
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	transfers := []benchResult{{Group: "h2d", Series: "pinned", SizeBytes: 4096, NsPerOp: 1e3, GBPerS: 4}}
	script, err := os.ReadFile(torchScript)
	require.NoError(t, err)

	for _, tc := range []struct {
		cuda, want string
	}{
		{"1", "measured"},
		{"0", "failed: error: torch.cuda.is_available() is False"},
	} {
		bundle, _ := stubBundle(t, map[string]string{"alloc": "--- PASS: TestA (0.00s)"}, nil, benchJSON(t, transfers))
		require.NoError(t, os.WriteFile(filepath.Join(bundle, "torch-peak.py"), script, 0o755))
		out := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(filepath.Join(path, "bash"), "../gpu-check.sh", "run", bundle, out)
		cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), "OMPALLOC_CUDA_LIBRARY=" + lib, "BENCH_TIME=2ms",
			"BENCH_SIZES=4K", "PYTHONPATH=" + mod, "STUB_LOG=" + filepath.Join(t.TempDir(), "log"), "STUB_CUDA=" + tc.cuda}
		msg, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", msg)
		var s struct {
			Torch  string `json:"torch"`
			Status int    `json:"status"`
		}
		data, err := os.ReadFile(filepath.Join(out, "summary.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &s), "%s", data)
		require.Equal(t, tc.want, s.Torch)
		require.Equal(t, 0, s.Status, "torch never changes the status")
		var rep torchReport
		data, err = os.ReadFile(filepath.Join(out, "torch.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &rep))
		if tc.cuda == "1" {
			require.Len(t, rep.Results, 2, "h2d and d2h at 4K")
		}
	}
}
