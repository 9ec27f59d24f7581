package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// TestMain removes the user's OMP_* and OMPALLOC_* settings (testenv).
func TestMain(m *testing.M) {
	testenv.Neutralize()
	m.Run()
}

// TestCases runs every case natively for a few operations, as run.sh runs
// it under cachegrind: each must set up, run and clean up without an error.
func TestCases(t *testing.T) {
	for _, name := range []string{"default-64", "align64-64", "default-4MiB", "pinned-64MiB", "lock-hit"} {
		t.Run(name, func(t *testing.T) {
			// On one P from the start, as run counts: a goroutine that moves
			// to another P misses its P's caches.
			prev := runtime.GOMAXPROCS(1)
			t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
			c, err := newCase(name, 100)
			if err != nil && name == "pinned-64MiB" {
				t.Skipf("no pinned allocator here: %v", err)
			}
			require.NoError(t, err)
			t.Cleanup(c.done)
			err = c.op(50) // the warm-up, as run's
			if err != nil && name == "pinned-64MiB" {
				t.Skipf("64 MiB cannot be pinned here: %v", err)
			}
			require.NoError(t, err)
			require.NoError(t, counted(c, 50), "the counted operations allocate no Go memory")
		})
	}
}

// counted fails a case whose operations allocate Go memory: with the
// collector off while counting, their collection would go uncounted.
func TestCountedRefusesGoAllocations(t *testing.T) {
	var keep []*[64]byte
	c := &benchCase{op: func(n int) error {
		for range n {
			keep = append(keep, new([64]byte))
		}
		return nil
	}}
	err := counted(c, 10)
	require.ErrorContains(t, err, "10 operations allocated")
	require.ErrorContains(t, err, "Go objects")
	require.Len(t, keep, 10)
	require.NoError(t, counted(&benchCase{op: func(int) error { return nil }}, 10))
	require.EqualError(t, counted(&benchCase{op: func(int) error { return errors.New("boom") }}, 1), "boom")
}

// TestRunArguments: bad arguments give exit status 2, a good run 0.
func TestRunArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-case", "default-64", "-n", "10"}, 0},
		{[]string{"-case", "default-64", "-n", "10", "-time", "-runs", "2"}, 0},
		{[]string{"-case", "no-such-case", "-n", "10"}, 2},
		{[]string{"-case", "default-64", "-n", "0"}, 2},
		{[]string{"-bogus"}, 2},
		{[]string{"-case", "default-64", "-n", "10", "-ref", "x.so"}, 2}, // -ref without -time
	} {
		require.Equal(t, tc.want, run(tc.args, io.Discard, io.Discard), "%v", tc.args)
	}
}

// buildC compiles the C source src into a shared object in a temporary
// directory with $CC (default gcc; leading flags allowed, as for go build)
// and returns its path. The test is skipped, saying why, without a
// compiler or when the one found builds for another architecture than
// this test binary (an arm64 binary under qemu needs
// CC=aarch64-linux-gnu-gcc).
func buildC(t *testing.T, src string) string {
	t.Helper()
	cc := strings.Fields(os.Getenv(fakedrv.CCEnv))
	if len(cc) == 0 {
		cc = []string{fakedrv.DefaultCC}
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		t.Skipf("no C compiler (%s) to build the -ref library: %v", cc[0], err)
	}
	so := filepath.Join(t.TempDir(), "ref.so")
	args := append(cc[1:], "-O2", "-fno-builtin", "-shared", "-fPIC", "-o", so, src)
	out, err := exec.Command(cc[0], args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", cc[0], args, out)
	if err := fakedrv.CheckArch(so); err != nil {
		t.Skipf("%s builds for another architecture: %v", cc[0], err)
	}
	return so
}

// runOut runs the program and returns its exit status, stdout and stderr.
func runOut(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestRefErrors: a -ref that is missing, that lacks glibc_pairs_ns, or that
// is given for a case without a glibc counterpart is a usage error (exit 2)
// whose message names what was wrong; nothing is printed on stdout.
func TestRefErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such.so")
	code, out, errs := runOut("-case", "default-64", "-n", "10", "-time", "-runs", "2", "-ref", missing)
	require.Equal(t, 2, code, errs)
	require.Empty(t, out)
	require.Contains(t, errs, missing)
	require.Contains(t, errs, "library not found")

	src := filepath.Join(t.TempDir(), "nosym.c")
	require.NoError(t, os.WriteFile(src, []byte("int not_the_function(void) { return 1; }\n"), 0o644))
	nosym := buildC(t, src)
	code, out, errs = runOut("-case", "default-64", "-n", "10", "-time", "-runs", "2", "-ref", nosym)
	require.Equal(t, 2, code, errs)
	require.Empty(t, out)
	require.Contains(t, errs, nosym)
	require.Contains(t, errs, "glibc_pairs_ns")
	require.Contains(t, errs, "symbol missing")

	for _, name := range []string{"pinned-64MiB", "lock-hit"} {
		code, out, errs = runOut("-case", name, "-n", "10", "-time", "-runs", "2", "-ref", nosym)
		require.Equal(t, 2, code, errs)
		require.Empty(t, out)
		require.Contains(t, errs, "case "+name+" has no glibc counterpart")
	}
}

// TestRefSideBySide runs the cases that have a glibc counterpart with
// -ref, the library built from glibc_pair.c as run.sh builds it: each
// prints its least ns, the reference's least under the counterpart's name
// (run.sh's table looks it up by that name), and the median of the paired
// ratios, all three positive numbers (no timing is asserted).
func TestRefSideBySide(t *testing.T) {
	so := buildC(t, "../glibc_pair.c")
	for _, tc := range []struct{ name, ref string }{
		{"default-64", "glibc-64"},
		{"align64-64", "glibc-64"},
		{"default-4MiB", "glibc-4194304"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runOut("-case", tc.name, "-n", "200", "-time", "-runs", "5", "-ref", so)
			require.Equal(t, 0, code, errs)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 3, out)
			want := [][]string{{tc.name}, {tc.ref}, {tc.name + "/" + tc.ref, "paired-median"}}
			for i, line := range lines {
				f := strings.Fields(line)
				require.Len(t, f, len(want[i])+1, line)
				require.Equal(t, want[i], f[:len(want[i])], line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				require.NoError(t, err, line)
				require.Greater(t, v, 0.0, line)
			}
		})
	}
}

// TestMedian: the middle value of an odd count, the mean of the two middle
// ones of an even count, whatever the order given.
func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{2.5}, 2.5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{2.6, 2.0, 2.7, 2.1, 2.65}, 2.6},
	} {
		require.InDelta(t, tc.want, median(append([]float64(nil), tc.in...)), 1e-12, "%v", tc.in)
	}
}
