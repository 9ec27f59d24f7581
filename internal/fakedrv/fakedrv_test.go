package fakedrv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

func TestSourcesEmbedded(t *testing.T) {
	require.Subset(t, Names(), []string{"fakecuda", "fakehsa"})
	code, err := Source("fakecuda")
	require.NoError(t, err)
	require.Contains(t, string(code), "cuInit")
	_, err = Source("no-such-fake")
	require.ErrorContains(t, err, "testdata/no-such-fake.c")
}

func TestBuildOnceConcurrently(t *testing.T) {
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			paths[i], _ = BuildPath("fakecuda")
		}(i)
	}
	wg.Wait()
	p := Build(t, "fakecuda")
	for _, q := range paths {
		require.Equal(t, p, q, "one build for every caller")
	}
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.NotZero(t, fi.Size())
}

func TestBuildMissingSource(t *testing.T) {
	if _, err := BuildPath("fakecuda"); err != nil {
		t.Skipf("no compiler: %v", err)
	}
	_, err := BuildPath("no-such-fake")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNoCompiler)
	require.Contains(t, err.Error(), "no-such-fake.c")
}

// A compiler that is not installed is a reason to skip, named in the error.
func TestNoCompiler(t *testing.T) {
	_, err := compile([]string{"ompalloc-no-such-cc"}, "fakecuda", t.TempDir())
	require.ErrorIs(t, err, ErrNoCompiler)
	require.ErrorContains(t, err, "ompalloc-no-such-cc")
}

// CC may carry flags after the program, as for go build; they reach the
// compiler (an -include of a missing header makes it fail, by that name).
func TestCCWithFlags(t *testing.T) {
	t.Setenv(CCEnv, "  cc1  -m64 ")
	require.Equal(t, []string{"cc1", "-m64"}, compiler())
	t.Setenv(CCEnv, "")
	require.Equal(t, []string{DefaultCC}, compiler())

	if _, err := exec.LookPath(DefaultCC); err != nil {
		t.Skipf("%s: %v", DefaultCC, err)
	}
	missing := filepath.Join(t.TempDir(), "ompalloc-missing.h")
	_, err := compile([]string{DefaultCC, "-include", missing}, "fakecuda", t.TempDir())
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNoCompiler)
	require.ErrorContains(t, err, "ompalloc-missing.h")
	require.ErrorContains(t, err, "compiling fakecuda.c")
}

// A compiler for another architecture builds a library this process could
// not load: that is refused as "no compiler" for this architecture, not
// left to surface as a driver that finds no devices.
func TestCompilerForAnotherArch(t *testing.T) {
	other := map[string]string{"amd64": "aarch64-linux-gnu-gcc", "arm64": "x86_64-linux-gnu-gcc"}[runtime.GOARCH]
	if runtime.GOOS != "linux" || other == "" {
		t.Skipf("no cross compiler known for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := exec.LookPath(other); err != nil {
		t.Skipf("%s is not installed (Debian: gcc-aarch64-linux-gnu or gcc-x86-64-linux-gnu)", other)
	}
	_, err := compile([]string{other}, "fakecuda", t.TempDir())
	require.ErrorIs(t, err, ErrNoCompiler)
	require.ErrorContains(t, err, "builds for another architecture")
	require.ErrorContains(t, err, "this process is "+runtime.GOARCH)
}

// A test binary built with -trimpath and run from an empty directory, as
// scripts/gpu-check.sh's bundle is on a GPU host, still builds the fakes:
// the sources are in the binary, not at the build machine's path.
func TestRelocatedTestBinary(t *testing.T) {
	if os.Getenv("FAKEDRV_RELOCATED") != "" {
		t.Skip("already the relocated copy")
	}
	testenv.Long(t, "builds this package's test binary with -trimpath")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	if _, err := exec.LookPath(compiler()[0]); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakedrv.test")
	build := exec.Command(goBin, "test", "-c", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	run := exec.Command(bin, "-test.v", "-test.count=1", "-test.run", "^TestBuildOnceConcurrently$")
	run.Dir = dir
	run.Env = append(os.Environ(), "TMPDIR="+dir, "FAKEDRV_RELOCATED=1")
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestBuildOnceConcurrently")
	require.NotContains(t, string(out), "SKIP")
	libs, err := filepath.Glob(filepath.Join(dir, "ompalloc-fakedrv", "fakecuda-*.so"))
	require.NoError(t, err)
	require.Len(t, libs, 1, "built in the relocated binary's TMPDIR")
	require.False(t, strings.Contains(string(out), "testdata"), "%s", out)

	// Without a compiler the same binary skips, saying why.
	run = exec.Command(bin, "-test.v", "-test.count=1", "-test.run", "^TestBuildOnceConcurrently$")
	run.Dir = dir
	run.Env = append(os.Environ(), "TMPDIR="+t.TempDir(), "FAKEDRV_RELOCATED=1", CCEnv+"=ompalloc-no-such-cc")
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- SKIP: TestBuildOnceConcurrently")
	require.Contains(t, string(out), "needs a C compiler (set CC)")
	require.Contains(t, string(out), "ompalloc-no-such-cc")
}
