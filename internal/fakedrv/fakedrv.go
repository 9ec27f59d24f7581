package fakedrv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// CC is the C compiler used; tests skip when it is not on PATH.
const CC = "gcc"

var (
	cacheOnce sync.Once
	cacheDir  string
	cacheErr  error

	mu     sync.Mutex
	builds = map[string]*build{}
)

// build is one library's compilation, shared by every test of the process.
type build struct {
	once sync.Once
	path string
	err  error
}

// errNoCompiler marks a missing C compiler: a reason to skip, not to fail.
var errNoCompiler = errors.New("C compiler not found")

// Dir returns the directory holding the C sources (this package's testdata),
// found from this source file so that it works from any package's test.
func Dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("fakedrv: cannot locate own source file")
	}
	d := filepath.Join(filepath.Dir(file), "testdata")
	if _, err := os.Stat(d); err != nil {
		return "", fmt.Errorf("fakedrv: testdata directory: %w", err)
	}
	return d, nil
}

// Source returns the path of testdata/<name>.c.
func Source(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, name+".c"), nil
}

// Build compiles testdata/<name>.c (for example "fakecuda") into a shared
// object and returns its path. The library is built once per process, in a
// per-process temporary directory, whichever test asks first; Build is safe
// for concurrent use. It skips tb when gcc is missing and fails tb when the
// compilation fails.
func Build(tb testing.TB, name string) string {
	tb.Helper()
	p, err := BuildPath(name)
	if errors.Is(err, errNoCompiler) {
		tb.Skipf("fakedrv: %v: the fake %s driver needs gcc", err, name)
	}
	if err != nil {
		tb.Fatalf("fakedrv: %v", err)
	}
	return p
}

// BuildPath is Build for callers without a testing.TB (TestMain): it returns
// an error instead. errors.Is(err, ErrNoCompiler) tells a missing compiler.
func BuildPath(name string) (string, error) {
	mu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = compile(name) })
	return b.path, b.err
}

// ErrNoCompiler is wrapped by BuildPath's error when gcc is not installed.
var ErrNoCompiler = errNoCompiler

func compile(name string) (string, error) {
	cc, err := exec.LookPath(CC)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", errNoCompiler, CC, err)
	}
	src, err := Source(name)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("fake driver source: %w", err)
	}
	dir, err := tempDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name+".so")
	cmd := exec.Command(cc, "-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s: %v\n%s", src, err, msg)
	}
	return out, nil
}

// Cleanup removes the built libraries. Call it from TestMain after m.Run;
// without it the directory stays behind in the OS temp dir.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if cacheDir != "" {
		_ = os.RemoveAll(cacheDir)
	}
}

// tempDir is one directory per process, named after what it holds.
func tempDir() (string, error) {
	cacheOnce.Do(func() {
		cacheDir, cacheErr = os.MkdirTemp("", fmt.Sprintf("fakedrv-%d-", os.Getpid()))
	})
	return cacheDir, cacheErr
}
