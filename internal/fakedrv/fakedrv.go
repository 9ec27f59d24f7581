package fakedrv

import (
	"crypto/sha256"
	"debug/elf"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// The C sources travel inside every test binary that imports this package,
// so that a binary copied to another machine (scripts/gpu-check.sh's bundle)
// needs no source tree: only a C compiler, and it skips without one.
//
//go:embed testdata/*.c
var sources embed.FS

// CCEnv names the variable holding the C compiler (and any leading flags,
// separated by spaces), as for go build: CC=aarch64-linux-gnu-gcc builds the
// fakes for an arm64 test binary run under qemu.
const CCEnv = "CC"

// DefaultCC is the compiler used when CC is unset or empty.
const DefaultCC = "gcc"

// flags are the compiler flags for every fake library.
var flags = []string{"-shared", "-fPIC", "-O1", "-pthread", "-Wall"}

// ErrNoCompiler is wrapped by BuildPath's error when no usable C compiler is
// installed (none on PATH, or one that builds for another architecture than
// this test binary's): a reason to skip, not to fail.
var ErrNoCompiler = errors.New("no C compiler")

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

// Names lists the fake drivers this package can build ("fakecuda", ...).
func Names() []string {
	ents, _ := fs.ReadDir(sources, "testdata")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".c"))
	}
	return names
}

// Source returns the C source of the fake driver name (testdata/<name>.c).
func Source(name string) ([]byte, error) {
	code, err := sources.ReadFile("testdata/" + name + ".c")
	if err != nil {
		return nil, fmt.Errorf("fake driver %q: no source testdata/%s.c (have %s)", name, name, strings.Join(Names(), ", "))
	}
	return code, nil
}

// Build compiles testdata/<name>.c (for example "fakecuda") into a shared
// object and returns its path. Each process builds a library at most once,
// whichever test asks first, and Build is safe for concurrent use. It skips
// tb when there is no usable C compiler and fails tb when the compilation
// fails.
func Build(tb testing.TB, name string) string {
	tb.Helper()
	p, err := BuildPath(name)
	if errors.Is(err, ErrNoCompiler) {
		tb.Skipf("fakedrv: the fake %s driver needs a C compiler (set %s): %v", name, CCEnv, err)
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
	b.once.Do(func() { b.path, b.err = compile(compiler(), name, os.TempDir()) })
	return b.path, b.err
}

// compiler returns $CC split into the program and its leading flags, or
// DefaultCC.
func compiler() []string {
	if cc := strings.Fields(os.Getenv(CCEnv)); len(cc) > 0 {
		return cc
	}
	return []string{DefaultCC}
}

// compile builds the library into tmp/ompalloc-fakedrv under a name that
// hashes its source, compiler and flags: test binaries of several packages
// running at once share one file, and a changed source gets a new one. The
// file is written under a temporary name and renamed, so nobody loads half
// of it.
func compile(cc []string, name, tmp string) (string, error) {
	code, err := Source(name)
	if err != nil {
		return "", err
	}
	ccPath, err := exec.LookPath(cc[0])
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoCompiler, cc[0], err)
	}
	h := sha256.New()
	h.Write(code)
	fmt.Fprint(h, cc, flags, runtime.GOOS, runtime.GOARCH)
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(tmp, "ompalloc-fakedrv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.so", name, sum))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	// The source goes to a directory of its own, under its own name, so that
	// the compiler's messages name fakecuda.c.
	work, err := os.MkdirTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	defer os.RemoveAll(work)
	src, so := filepath.Join(work, name+".c"), filepath.Join(work, name+".so")
	if err := os.WriteFile(src, code, 0o644); err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	args := append(append(append([]string(nil), cc[1:]...), flags...), "-o", so, src)
	if msg, err := exec.Command(ccPath, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s.c with %s: %v\n%s", name, strings.Join(cc, " "), err, msg)
	}
	if err := CheckArch(so); err != nil {
		return "", fmt.Errorf("%w for %s/%s: %s (%s=%q) builds for another architecture: %v", ErrNoCompiler,
			runtime.GOOS, runtime.GOARCH, cc[0], CCEnv, os.Getenv(CCEnv), err)
	}
	if err := os.Rename(so, out); err != nil {
		return "", fmt.Errorf("fake driver cache: %w", err)
	}
	return out, nil
}

// elfMachine is the ELF machine of each GOARCH whose test binaries load the
// fakes.
var elfMachine = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// CheckArch reports an error when the shared library at path is for another
// architecture than this process, which could not load it: a plain gcc
// builds for the machine, not for an arm64 test binary run under qemu, and
// the x86-64 driver that a test finds is no driver for that binary. Without
// the check, dlopen's failure surfaces much later, as "no devices". Tests of
// a real driver library skip on this error.
func CheckArch(so string) error {
	want, ok := elfMachine[runtime.GOARCH]
	if !ok || runtime.GOOS != "linux" {
		return nil // not ELF, or an architecture not listed: dlopen will tell
	}
	f, err := elf.Open(so)
	if err != nil {
		return fmt.Errorf("reading the library it built: %w", err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is %s code, this process is %s (%s)", filepath.Base(so), f.Machine, runtime.GOARCH, want)
	}
	return nil
}
