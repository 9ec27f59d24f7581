package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// Every example is built (cgo-free, as users get it) and run with a time
// bound; it must exit 0 and print what it is there to show.
func TestExamples(t *testing.T) {
	testenv.Long(t, "builds and runs every example program")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH to build the examples")
	}
	bin := t.TempDir()
	build := exec.Command(goBin, "build", "-o", bin+string(filepath.Separator), "./...")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./examples/...:\n%s", out)

	for _, tc := range []struct {
		name string
		says []string
	}{
		{"pinned", []string{"VmLck before", "4 KiB aligned: true", "fallback: omp_default_mem_alloc", "ErrPinFailed): true"}},
		{"lockmem", []string{"references 2", "ErrOverlap): true", "kmp returns nil: true", "after two unlocks: 0 entries", "ErrNotLocked): true", "ErrBadDevice): true"}},
		{"tensor", []string{"params pinned: true", "params pinned after Unpin: false", "verified 65536 floats", "params [256 256]", "live blocks after release: 0"}},
		{"envalloc", []string{"omp_large_cap_mem_alloc (handle 2)", "alignment=64,pool_size=1048576", "must be a power of two", `unknown allocator or memory space "no_such_allocator"`}},
		{"pipeline", []string{"host buffers pinned: true", "overlap saved", "pipeline: {", "last batch verified", "released"}},
		{"transfer", []string{"round trip ok", "first, with first touch", "second, copies only", "offset copy ok: true", "ErrBadDevice): true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, tc.name))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "%s ran past its time bound", tc.name)
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			for _, s := range tc.says {
				require.Contains(t, stdout.String(), s)
			}
		})
	}
}

// The pipeline example on the fake GPU drivers of internal/fakedrv: late
// copies on driver threads, events ordering two queues, event timing (CUDA's
// event timer; HSA's async copy timestamps).
func TestPipelineOnFakeDrivers(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH to build the examples")
	}
	bin := filepath.Join(t.TempDir(), "pipeline")
	build := exec.Command(goBin, "build", "-o", bin, "./pipeline")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, tc := range []struct {
		name string
		env  []string
		says []string
	}{
		{"fakecuda", []string{"FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=300", "OMPALLOC_DISABLE_HSA=1"},
			[]string{"device: device 0 (cuda Fake CUDA Device 0)", "overlap saved", "achieved host-to-device bandwidth:", "GB/s",
				"peak for 4 MiB, the same pinned copy alone:", "last batch verified"}},
		{"fakehsa", []string{"FAKEHSA_GPUS=2", "OMPALLOC_DISABLE_CUDA=1"},
			[]string{"device: device 0 (amdgpu", "achieved host-to-device bandwidth:", "GB/s",
				"peak for 4 MiB, the same pinned copy alone:", "last batch verified"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := fakedrv.Build(t, tc.name)
			env := append(os.Environ(), "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_HSA_LIBRARY="+lib)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(env, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "ran past its time bound")
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			for _, s := range tc.says {
				require.Contains(t, stdout.String(), s)
			}
			// The line scripts read (the GPU bundle's pipeline.json).
			var res struct {
				Pinned  bool     `json:"pinned"`
				Batches int      `json:"batches"`
				Overlap *float64 `json:"overlap"`
				H2D     float64  `json:"h2d_gb_per_s"`
				Peak    float64  `json:"peak_h2d_gb_per_s"`
				OfPeak  float64  `json:"of_peak"`
			}
			line := ""
			for _, l := range strings.Split(stdout.String(), "\n") {
				if rest, ok := strings.CutPrefix(l, "pipeline: "); ok {
					line = rest
				}
			}
			require.NoError(t, json.Unmarshal([]byte(line), &res), "the result line: %q", line)
			require.True(t, res.Pinned)
			require.Equal(t, 16, res.Batches)
			require.NotNil(t, res.Overlap)
			require.Positive(t, res.H2D, "both drivers time events")
			require.Positive(t, res.Peak)
			require.InDelta(t, res.H2D/res.Peak, res.OfPeak, 1e-9)
			t.Logf("%s", stdout.String())
		})
	}
}
