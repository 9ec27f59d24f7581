package logging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/warn"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/logging"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

type record struct {
	kind, pkg, msg string
	err            error
}

// recorder is a slog.Handler keeping every record.
type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	x := record{msg: rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "kind":
			x.kind = a.Value.String()
		case "package":
			x.pkg = a.Value.String()
		case "err":
			x.err, _ = a.Value.Any().(error)
		}
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, x)
	r.mu.Unlock()
	return nil
}

func (r *recorder) of(kind string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, x := range r.recs {
		if x.kind == kind {
			out = append(out, x)
		}
	}
	return out
}

// use sets l as the module's logger for the rest of the test.
func use(t *testing.T, l *slog.Logger) {
	old := logging.Logger()
	logging.SetLogger(l)
	t.Cleanup(func() { logging.SetLogger(old) })
}

// Every kind of warning the module gives reaches the logger, with its kind,
// its package and, where there is one, an error matching its sentinel; none
// reaches stderr. (This test must be the first of the binary to touch alloc
// and target: the environment is read once, at first use. The hugetlb
// warning needs a hugetlb pool that refuses; alloc's tests check it goes
// through the same hook.)
func TestHookReceivesEveryKind(t *testing.T) {
	t.Setenv(envvar.Allocator, "no_such_allocator")
	t.Setenv(envvar.DefaultDevice, "not-a-number")
	t.Setenv("OMPALLOC_PINNED_LIMIT", "")
	t.Setenv("OMPALLOC_HUGEPAGES", "")
	var stderr bytes.Buffer
	t.Cleanup(warn.SetOutput(&stderr))
	rec := &recorder{}
	use(t, slog.New(rec))

	// env: OMP_ALLOCATOR (alloc) and OMP_DEFAULT_DEVICE (target).
	require.Equal(t, uintptr(kmp.DefaultMemAlloc), ompglue.Handle(alloc.Default()))
	_ = target.InitialDevice()

	// bad_input: kmp's C-style answer to an unknown handle.
	kmp.DestroyAllocator(kmp.AllocatorHandle(77777))

	// live_blocks: Destroy with a block still allocated, under defer.
	func() {
		a, err := alloc.New(memspace.Default)
		require.NoError(t, err)
		p, err := a.Alloc(64)
		require.NoError(t, err)
		t.Cleanup(func() { _ = alloc.Free(p) })
		defer a.Destroy() //nolint:errcheck // the point: the report is not lost
	}()

	// pin_fallback: pinning refused, the fallback serves, kmp says so once.
	disarm := fault.Arm(fault.PinLock, 0, nil)
	h := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{
		{Key: kmp.AtkPinned, Value: kmp.AtvTrue},
		{Key: kmp.AtkPinDevice, Value: uintptr(target.InitialDevice())},
		{Key: kmp.AtkFallback, Value: kmp.AtvDefaultMemFb},
	})
	require.NotEqual(t, kmp.NullAllocator, h)
	p := kmp.Alloc(64, h)
	disarm()
	require.NotNil(t, p)
	kmp.Free(p, h)
	kmp.DestroyAllocator(h)

	// dropped_lock: a user lock inside a pinned chunk released by Trim.
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(target.InitialDevice()), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	q, err := a.Alloc(64)
	if errors.Is(err, alloc.ErrPinFailed) {
		t.Logf("dropped_lock not checked: this machine cannot pin (%v)", err)
	} else {
		require.NoError(t, err)
		require.NotNil(t, kmp.TargetLockMem(q, 64, target.InitialDevice()))
		require.NoError(t, alloc.Free(q))
	}
	require.NoError(t, a.Destroy())
	alloc.Trim()

	// unfreed: a Buffer dropped without Free.
	func() {
		b, err := alloc.NewBuffer[float64](alloc.Default(), 8)
		require.NoError(t, err)
		_ = b.Len()
	}()
	for deadline := time.Now().Add(10 * time.Second); len(rec.of(warn.Unfreed)) == 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}

	want := map[string]struct {
		pkgs     []string
		sentinel error
		text     string
	}{
		warn.Env:         {[]string{"alloc", "target"}, nil, "OMP_ALLOCATOR"},
		warn.BadInput:    {[]string{"kmp"}, nil, "omp_destroy_allocator"},
		warn.LiveBlocks:  {[]string{"alloc"}, alloc.ErrLiveBlocks, "1 block (64 bytes)"},
		warn.PinFallback: {[]string{"alloc"}, alloc.ErrPinFailed, "unpinned"},
		warn.Unfreed:     {[]string{"alloc"}, nil, "Buffer[float64]"},
	}
	if !errors.Is(err, alloc.ErrPinFailed) {
		want[warn.DroppedLock] = struct {
			pkgs     []string
			sentinel error
			text     string
		}{[]string{"alloc"}, nil, "1 locks (TargetLockMem)"}
	}
	for kind, w := range want {
		got := rec.of(kind)
		require.NotEmpty(t, got, "no %s warning reached the logger", kind)
		var pkgs []string
		var texts []string
		for _, g := range got {
			pkgs = append(pkgs, g.pkg)
			texts = append(texts, g.msg)
			require.False(t, strings.HasPrefix(g.msg, "ompalloc: warning:"), "the prefix is the default line's, not the message's: %q", g.msg)
			if w.sentinel != nil {
				require.ErrorIs(t, g.err, w.sentinel, "%s: the err attribute", kind)
			}
		}
		for _, p := range w.pkgs {
			require.Contains(t, pkgs, p, "%s warnings: %q", kind, texts)
		}
		require.Contains(t, strings.Join(texts, "\n"), w.text)
	}
	require.Len(t, rec.of(warn.LiveBlocks), 1, "Destroy's report once (kmp does not repeat it)")
	require.Empty(t, stderr.String(), "nothing on the default output while a logger is set")
}

// With no logger the line is today's: "ompalloc: warning: " and the text.
func TestDefaultLineUnchanged(t *testing.T) {
	var out bytes.Buffer
	t.Cleanup(warn.SetOutput(&out))
	use(t, nil)
	kmp.Free(unsafe.Pointer(&out), kmp.DefaultMemAlloc) // Go memory: bad input
	line := out.String()
	require.True(t, strings.HasPrefix(line, "ompalloc: warning: omp_free: "), line)
	require.Equal(t, 1, strings.Count(line, "\n"), line)
}

// A discarding logger silences everything.
func TestSilence(t *testing.T) {
	var out bytes.Buffer
	t.Cleanup(warn.SetOutput(&out))
	use(t, slog.New(slog.DiscardHandler))
	kmp.DestroyAllocator(kmp.AllocatorHandle(77778))
	require.Empty(t, out.String())
}

// No package of the module writes a warning line itself: every one goes
// through internal/warn, so the hook sees it.
func TestNoWarningBypassesTheHook(t *testing.T) {
	root := filepath.Join("..")
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "cmd", "bench", "scripts", "examples", "testdata", ".git", "warn", "leakcheck":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if code, _, _ := strings.Cut(line, "//"); strings.Contains(code, "ompalloc: warning:") || strings.Contains(code, "os.Stderr") {
				offenders = append(offenders, fmt.Sprintf("%s:%d: %s", path, i+1, strings.TrimSpace(line)))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "these write warnings past the hook (use internal/warn)")
}

// The kinds the package doc lists are the ones the packages send: every
// constant of internal/warn, and no other.
func TestDocumentedKindsMatchTheSenders(t *testing.T) {
	fset := token.NewFileSet()
	doc, err := parser.ParseFile(fset, "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	_, kinds, ok := strings.Cut(doc.Doc.Text(), "\n# Kinds\n")
	require.True(t, ok, "the package doc has a Kinds section")
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^  - "([a-z_]+)":`).FindAllStringSubmatch(kinds, -1) {
		documented = append(documented, m[1])
	}

	src, err := parser.ParseFile(fset, filepath.Join("..", "internal", "warn", "warn.go"), nil, 0)
	require.NoError(t, err)
	var sent []string
	for _, d := range src.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok, "warn's kinds are string literals")
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					sent = append(sent, s)
				}
			}
		}
	}
	require.Len(t, sent, 8, "the walk finds warn's kinds")
	require.ElementsMatch(t, sent, documented, "go doc ./logging lists every kind a record can carry")
}
