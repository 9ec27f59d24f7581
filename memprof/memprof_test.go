package memprof_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memprof"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// withRate sets the sampling rate for one test.
func withRate(t *testing.T, rate int) {
	old := memprof.SetRate(rate)
	t.Cleanup(func() { memprof.SetRate(old) })
}

// pprofTool runs go tool pprof on a profile written now and returns its
// output; it skips without the go command.
func pprofTool(t *testing.T, args ...string) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool pprof needs the go command, not on PATH")
	}
	f := filepath.Join(t.TempDir(), "ompalloc.pb.gz")
	var buf bytes.Buffer
	require.NoError(t, memprof.WriteHeapProfile(&buf))
	require.NoError(t, os.WriteFile(f, buf.Bytes(), 0o600))
	cmd := exec.Command(goCmd, append(append([]string{"tool", "pprof"}, args...), f)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go tool pprof %v: %s", args, out)
	return string(out)
}

//go:noinline
func allocateForProfile(t *testing.T, a *alloc.Allocator, n int, size uintptr) []unsafe.Pointer {
	ps := make([]unsafe.Pointer, n)
	for i := range ps {
		p, err := a.Alloc(size)
		require.NoError(t, err)
		ps[i] = p
	}
	return ps
}

// Every allocation sampled (rate 1): the profile go tool pprof reads back
// has Go's four sample types, the stack down to the caller, the labels, and
// in-use figures that drop when blocks are freed while the allocated ones
// stay.
func TestProfileReadByPprof(t *testing.T) {
	testenv.Long(t, "runs go tool pprof, which the go command may build first")
	withRate(t, 1)
	plain, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Destroy() })
	pinnedA, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(target.InitialDevice()),
		alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pinnedA.Destroy() })

	ps := allocateForProfile(t, plain, 10, 1000)
	p1, pinErr := pinnedA.Alloc(1)
	if pinErr == nil {
		t.Cleanup(func() { require.NoError(t, alloc.Free(p1)) })
		qs := allocateForProfile(t, pinnedA, 3, 4096)
		t.Cleanup(func() {
			for _, q := range qs {
				require.NoError(t, alloc.Free(q))
			}
		})
	}

	raw := pprofTool(t, "-raw")
	require.Contains(t, raw, "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes")
	require.Contains(t, raw, "memprof_test.allocateForProfile")
	require.Contains(t, raw, "TestProfileReadByPprof")
	require.Contains(t, raw, "allocator:["+plain.String()+"]")
	require.Contains(t, raw, "memspace:[omp_default_mem_space]")
	// 10 blocks of 1000 bytes, from one stack: every figure exact at rate 1.
	requireSample(t, raw, 10, 10000, 10, 10000)
	if pinErr == nil {
		require.Contains(t, raw, "pinned:[true]")
		requireSample(t, raw, 3, 12288, 3, 12288)
		requireSample(t, raw, 1, 1, 1, 1)
	} else {
		t.Logf("pinned label not checked: %v", pinErr)
	}

	for _, p := range ps[:4] {
		require.NoError(t, alloc.Free(p))
	}
	raw = pprofTool(t, "-raw")
	requireSample(t, raw, 10, 10000, 6, 6000, "4 freed: in use drops, allocated stays")

	top := pprofTool(t, "-top", "-sample_index=inuse_space", "-tagfocus=allocator="+regexp.QuoteMeta(plain.String()))
	require.Contains(t, top, "allocateForProfile")
	for _, p := range ps[4:] {
		require.NoError(t, alloc.Free(p))
	}
}

// At Go's default rate the sampled figures estimate the real ones: 64 MiB
// in 1 KiB blocks reads as 64 MiB within a few percent (about 128 samples:
// the estimate's standard deviation is about 9%, so the bound is 35%).
func TestSampledEstimate(t *testing.T) {
	withRate(t, 512<<10) // Go's default runtime.MemProfileRate
	a, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	const n, size = 64 << 10, 1 << 10
	ps := allocateForProfile(t, a, n, size)
	t.Cleanup(func() {
		for _, p := range ps {
			_ = alloc.Free(p)
		}
	})
	top := pprofTool(t, "-top", "-sample_index=inuse_space", "-unit=MB", "-tagfocus=allocator="+regexp.QuoteMeta(a.String()))
	// "Showing nodes accounting for 66.2MB, 100% of 66.2MB total"
	i := strings.Index(top, "% of ")
	require.Positive(t, i, top)
	var mb float64
	_, err = fmt.Sscanf(top[i+len("% of "):], "%fMB total", &mb)
	require.NoError(t, err, top)
	t.Logf("64 MiB in 1 KiB blocks reads %.1f MB (true %.1f MB)", mb, float64(n*size)/1e6)
	require.InDelta(t, float64(n*size)/1e6, mb, 0.35*float64(n*size)/1e6, top)
}

// Off, nothing is sampled.
func TestOffSamplesNothing(t *testing.T) {
	withRate(t, 0)
	a, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	ps := allocateForProfile(t, a, 1000, 1<<20)
	for _, p := range ps {
		require.NoError(t, alloc.Free(p))
	}
	require.NotContains(t, pprofTool(t, "-raw"), "TestOffSamplesNothing")
}

// The handler serves a gzip'd profile, as net/http/pprof's heap handler.
func TestHandler(t *testing.T) {
	withRate(t, 1)
	srv := httptest.NewServer(memprof.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	body, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Contains(t, string(body), "inuse_space")
}

// The pools' figures are an expvar; a refused pin counts as a failure of
// the device's pool.
func TestExpvarPools(t *testing.T) {
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(target.InitialDevice()),
		alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	alloc.Trim()
	var before alloc.PinnedPoolStats
	for _, p := range alloc.ReadPinnedStats().Pools {
		if p.Device == target.InitialDevice() && p.Bound == nil {
			before = p
		}
	}
	disarm := fault.Arm(fault.PinLock, 0, nil)
	_, err = a.Alloc(3 << 20) // a huge region: never served from a kept chunk
	disarm()
	require.ErrorIs(t, err, alloc.ErrPinFailed)

	var got struct {
		Pinned alloc.PinnedStats `json:"pinned"`
	}
	require.NoError(t, json.Unmarshal([]byte(expvar.Get("ompalloc").String()), &got))
	var pool *alloc.PinnedPoolStats
	for i := range got.Pinned.Pools {
		if got.Pinned.Pools[i].Device == target.InitialDevice() {
			pool = &got.Pinned.Pools[i]
		}
	}
	require.NotNil(t, pool, "the initial device's pool in %s", expvar.Get("ompalloc").String())
	require.Equal(t, before.Failures+1, pool.Failures)
	require.NotEmpty(t, pool.Nodes)
	var sum int64
	for _, n := range pool.Nodes {
		sum += n.Failures
	}
	require.Equal(t, pool.Failures, sum, "per node figures add up")
}

// requireSample checks that the -raw output has a sample with these values.
func requireSample(t *testing.T, raw string, ao, ab, io, ib int, msg ...any) {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+%d\s+%d\s+%d:`, ao, ab, io, ib))
	require.Regexp(t, re, raw, msg...)
}

// SetRate returns the rate it replaced, which puts it back: the one door
// to read the rate (a negative rate is 0, off).
func TestSetRateReturnsTheOld(t *testing.T) {
	old := memprof.SetRate(7)
	t.Cleanup(func() { memprof.SetRate(old) })
	require.Equal(t, 7, memprof.SetRate(9))
	require.Equal(t, 9, memprof.SetRate(-1))
	require.Equal(t, 0, memprof.SetRate(0), "a negative rate turned sampling off")
}
