//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Neutralize()
	os.Exit(m.Run())
}

// The probe against the project's fake libcuda, which follows the CUDA
// reference where the probe asks (internal/fakedrv quotes it): every
// question is answered, the JSON is valid, and the answers are the
// documented ones, so the probe reads the driver's results the right way
// round. A real driver's answers settle the questions; these check the
// probe.
func TestProbeAgainstTheFake(t *testing.T) {
	lib := fakedrv.Build(t, "fakecuda")
	out := filepath.Join(t.TempDir(), "probe.json")
	runtime.LockOSThread() // as main's init does: contexts are per thread
	defer runtime.UnlockOSThread()
	require.Equal(t, 0, run(lib, out, 4<<20))

	var rep Report
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &rep), "%s", data)
	require.Equal(t, Schema, rep.Schema)
	require.Equal(t, lib, rep.Library)
	require.Equal(t, 2, rep.Devices, "the fake's two GPUs")
	require.Empty(t, rep.Error)
	got := map[string]*Answer{}
	for _, q := range rep.Questions {
		require.Empty(t, q.Error, "%+v", q)
		got[q.Name] = q
	}
	require.Len(t, got, len(questions))

	mixed := got["mixed_range_copy"]
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", mixed.Results["htod_sync"], "the reference's note on every memcpy")
	require.Equal(t, false, mixed.Results["data_ok"])
	require.Equal(t, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", got["shared_page_registrations"].Results["register_second"])
	require.Equal(t, "CUDA_ERROR_NOT_READY", got["portable_dtoh_async"].Results["stream_query_after_queue"], "the fake's copies are late")
	require.Equal(t, "device 1's primary context", got["portable_dtoh_async"].Results["other_context"])
	cc := got["caller_context"]
	require.Equal(t, cc.Results["before"], cc.Results["after"], "ompalloc gives the caller's context back (issue 19 item 5)")
	require.Contains(t, cc.Answer, "kept")
	for _, k := range []string{"cuMemHostUnregister_busy_ns", "cuMemFreeHost_busy_ns", "cuMemHostUnregister_idle_ns", "busy_alone_ns"} {
		require.Greater(t, got["release_while_busy"].Results[k], 0.0, k)
	}
	nb := got["node_bandwidth"]
	if nb.Skipped == "" {
		near, ok := nb.Results["per_node"].(map[string]any)["near"].(map[string]any)
		require.True(t, ok, "%+v", nb.Results)
		require.Greater(t, near["registered_gb_per_s"], 0.0, "%+v", near)
		require.Greater(t, near["peak_gb_per_s"], 0.0, "%+v", near)
		require.NotEmpty(t, near["peak_pages_on"])
	}
	require.Equal(t, 1, run(filepath.Join(t.TempDir(), "other.so"), filepath.Join(t.TempDir(), "other.json"), 4<<20),
		"another library in the same process: the plugin loaded one")
}

// A library that is not there: an error in the JSON and a non-zero exit, no
// panic. In a process of its own: a process loads libcuda once.
func TestProbeMissingLibrary(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProbeMissingLibrary$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestProbeMissingLibrary")
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.Equal(t, 1, run(filepath.Join(t.TempDir(), "nonexistent.so"), bad, 4<<20))
	data, err := os.ReadFile(bad)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Contains(t, rep.Error, "dlopen")
}

// childEnv marks the child process of TestProbeMissingLibrary.
const childEnv = "GPUPROBE_TEST_CHILD"
