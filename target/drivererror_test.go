package target

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/loader"
)

const driverErrorChildEnv = "OMPALLOC_TARGET_DRIVERERROR_CHILD"

// driverErrorCases are the init failures a user meets without a usable
// GPU, on both fakes: each child process discovers with one of them.
// libs: the fakes' paths, "cuda" and "hsa".
var driverErrorCases = []struct {
	name   string
	env    func(libs map[string]string) []string
	plugin string   // the driver that fails
	is     error    // what its error matches
	init   string   // DriverError.Init's start
	advice []string // in DriverError.Advice, one of them (the machine decides: /dev/kfd)
}{
	{"cuda/driver too old", func(l map[string]string) []string {
		return []string{"OMPALLOC_CUDA_LIBRARY=" + l["cuda"], "FAKECUDA_VERSION=10020", "OMPALLOC_DISABLE_HSA=1"}
	}, "cuda", loader.ErrInitFailed, "driver too old: CUDA 10.2",
		[]string{"update the NVIDIA driver to one of CUDA 11.0 or later (R450 and up); CUDA devices are skipped"}},
	{"cuda/no device", func(l map[string]string) []string {
		return []string{"OMPALLOC_CUDA_LIBRARY=" + l["cuda"], "FAKECUDA_DEVICES=0", "OMPALLOC_DISABLE_HSA=1"}
	}, "cuda", loader.ErrInitFailed, "CUDA_ERROR_NO_DEVICE",
		[]string{"the CUDA driver is installed, but it finds no NVIDIA GPU"}},
	{"cuda/disabled", func(l map[string]string) []string {
		return []string{"OMPALLOC_CUDA_LIBRARY=" + l["cuda"], "OMPALLOC_DISABLE_CUDA=1", "OMPALLOC_DISABLE_HSA=1"}
	}, "cuda", loader.ErrDisabled, "disabled: ",
		[]string{"unset OMPALLOC_DISABLE_CUDA to use NVIDIA GPUs"}},
	{"cuda/missing library", func(l map[string]string) []string {
		return []string{"OMPALLOC_CUDA_LIBRARY=/nonexistent/libcuda.so.1", "OMPALLOC_DISABLE_HSA=1"}
	}, "cuda", loader.ErrNotFound, "not found: ",
		[]string{"OMPALLOC_CUDA_LIBRARY=/nonexistent/libcuda.so.1 names no loadable library"}},
	{"cuda/another library", func(l map[string]string) []string {
		return []string{"OMPALLOC_CUDA_LIBRARY=" + l["hsa"], "OMPALLOC_DISABLE_HSA=1"}
	}, "cuda", loader.ErrSymbolMissing, "symbol missing: ",
		[]string{"the library lacks driver functions ompalloc needs: an NVIDIA driver older than CUDA 11.0"}},
	{"amdgpu/no device", func(l map[string]string) []string {
		return []string{"OMPALLOC_HSA_LIBRARY=" + l["hsa"], "FAKEHSA_NO_KFD=1", "OMPALLOC_DISABLE_CUDA=1"}
	}, "amdgpu", loader.ErrInitFailed, "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
		[]string{"hsa_init failed: there is no /dev/kfd: no AMD GPU in this machine", "hsa_init failed: it could not use /dev/kfd (is this user in the render group?)"}},
	{"amdgpu/disabled", func(l map[string]string) []string {
		return []string{"OMPALLOC_HSA_LIBRARY=" + l["hsa"], "OMPALLOC_DISABLE_HSA=1", "OMPALLOC_DISABLE_CUDA=1"}
	}, "amdgpu", loader.ErrDisabled, "HSA runtime: library disabled",
		[]string{"unset OMPALLOC_DISABLE_HSA to use AMD GPUs"}},
	{"amdgpu/missing library", func(l map[string]string) []string {
		return []string{"OMPALLOC_HSA_LIBRARY=/nonexistent/libhsa-runtime64.so.1", "OMPALLOC_DISABLE_CUDA=1"}
	}, "amdgpu", loader.ErrNotFound, "HSA runtime: library not found",
		[]string{"OMPALLOC_HSA_LIBRARY=/nonexistent/libhsa-runtime64.so.1 names no loadable library"}},
	{"amdgpu/another library", func(l map[string]string) []string {
		return []string{"OMPALLOC_HSA_LIBRARY=" + l["cuda"], "OMPALLOC_DISABLE_CUDA=1"}
	}, "amdgpu", loader.ErrSymbolMissing, "",
		[]string{"the library lacks HSA functions ompalloc needs: a ROCm runtime older than ompalloc needs"}},
}

// Issue 28 item 5: the init advice a user needs is a typed error any
// program gets through errors.As, from Plugins and from Get of a device
// that is not there, still matching the loader's sentinels.
func TestDriverError(t *testing.T) {
	if os.Getenv(driverErrorChildEnv) != "" {
		t.Skip("in the child")
	}
	libs := map[string]string{"cuda": fakedrv.Build(t, "fakecuda"), "hsa": fakedrv.Build(t, "fakehsa")}
	for _, c := range driverErrorCases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDriverErrorChild$", "-test.v", "-test.count=1", "-test.timeout=60s")
			cmd.Env = append(os.Environ(), driverErrorChildEnv+"="+c.name,
				"OMPALLOC_CUDA_LIBRARY=", "OMPALLOC_HSA_LIBRARY=", "OMPALLOC_DISABLE_CUDA=", "OMPALLOC_DISABLE_HSA=",
				"FAKECUDA_DEVICES=1", "FAKECUDA_VERSION=", "FAKECUDA_FAIL=", "FAKEHSA_GPUS=1", "FAKEHSA_NO_KFD=", "FAKEHSA_FAIL=")
			cmd.Env = append(cmd.Env, c.env(libs)...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestDriverErrorChild", "%s", out)
		})
	}
}

func TestDriverErrorChild(t *testing.T) {
	name := os.Getenv(driverErrorChildEnv)
	if name == "" {
		t.Skip("run by TestDriverError")
	}
	for _, c := range driverErrorCases {
		if c.name != name {
			continue
		}
		var st *DriverStatus
		for _, s := range Plugins() {
			if s.Plugin == c.plugin {
				st = &s
			}
		}
		require.NotNil(t, st, "%+v", Plugins())
		var de *DriverError
		require.ErrorAs(t, st.Err, &de)
		require.ErrorIs(t, st.Err, c.is, "the loader's sentinel still matches")
		require.Equal(t, c.plugin, de.Plugin)
		require.True(t, strings.HasPrefix(de.Init, c.init), "Init %q", de.Init)
		require.Equal(t, st.Init, de.Init)
		require.Equal(t, st.Library, de.Library)
		found := false
		for _, a := range c.advice {
			found = found || strings.Contains(de.Advice, a)
		}
		require.True(t, found, "advice %q, want one of %q", de.Advice, c.advice)
		msg := de.Error()
		require.True(t, strings.HasPrefix(msg, c.plugin+": "), "%q", msg)
		require.Contains(t, msg, de.Advice, "the message carries the advice")
		require.NotContains(t, msg, c.plugin+": "+c.plugin+":", "the prefix once")
		t.Logf("%s", msg)

		// A program asking for a GPU that is not there learns why.
		require.Zero(t, NumDevices())
		_, err := Get(1)
		require.ErrorIs(t, err, ErrBadDevice)
		require.ErrorIs(t, err, c.is)
		var first *DriverError
		require.ErrorAs(t, err, &first)
		require.Contains(t, err.Error(), "(the only device is 0, the host); no devices from ")
		require.Contains(t, err.Error(), de.Advice)
		require.NotContains(t, err.Error(), "\n")
		return
	}
	t.Fatalf("no case %q", name)
}
