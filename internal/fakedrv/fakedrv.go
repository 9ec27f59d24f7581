package fakedrv

import (
	"crypto/sha256"
	"encoding/hex"
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

// flags are gcc's flags for every fake library.
var flags = []string{"-shared", "-fPIC", "-O1", "-pthread", "-Wall"}

// ErrNoCompiler is wrapped by BuildPath's error when gcc is not installed:
// a reason to skip, not to fail.
var ErrNoCompiler = errors.New("C compiler not found")

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

// build is one library's compilation, shared by every test of the process.
type build struct {
	once sync.Once
	path string
	err  error
}

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
// object and returns its path. Each process builds a library at most once,
// whichever test asks first, and Build is safe for concurrent use. It skips
// tb when gcc is missing and fails tb when the compilation fails.
func Build(tb testing.TB, name string) string {
	tb.Helper()
	p, err := BuildPath(name)
	if errors.Is(err, ErrNoCompiler) {
		tb.Skipf("fakedrv: %v: the fake %s driver needs gcc", err, name)
	}
	if err != nil {
		tb.Fatalf("fakedrv: %v", err)
	}
	return p
}

// BuildPath is Build for callers without a testing.TB (TestMain): it returns
// an error instead; errors.Is(err, ErrNoCompiler) tells a missing compiler.
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

// compile builds the library into the OS temp directory under a name that
// hashes its source and flags: test binaries of several packages running at
// once share one file, and a changed source gets a new one. The file is
// written under a temporary name and renamed, so nobody loads half of it.
func compile(name string) (string, error) {
	cc, err := exec.LookPath(CC)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoCompiler, CC, err)
	}
	src, err := Source(name)
	if err != nil {
		return "", err
	}
	code, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("fake driver source: %w", err)
	}
	h := sha256.New()
	h.Write(code)
	fmt.Fprint(h, flags, runtime.GOOS, runtime.GOARCH)
	dir := filepath.Join(os.TempDir(), "ompalloc-fakedrv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.so", name, hex.EncodeToString(h.Sum(nil))[:16]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tmp, err := os.CreateTemp(dir, name+"-*.so.tmp")
	if err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append(append([]string(nil), flags...), "-o", tmp.Name(), src)
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s: %v\n%s", src, err, msg)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	return out, nil
}
