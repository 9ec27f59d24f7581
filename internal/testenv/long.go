package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// LongEnv, set to any value, runs the long tests: hammers and soaks that
// run for seconds, litmus tests of many rounds, and tests that build whole
// programs or test binaries with the go tool. The README's test command,
// `go test -count=1 ./...`, leaves them out so that it finishes in a few
// minutes on a small machine; CI runs them (.ci/run exports it), as
//
//	OMPALLOC_LONG_TESTS=1 go test -count=1 ./...
//
// Neutralize keeps it: it is a request to the test run.
const LongEnv = "OMPALLOC_LONG_TESTS"

// LongTests reports whether LongEnv asks for the long tests.
func LongTests() bool { return os.Getenv(LongEnv) != "" }

// Long skips t unless LongEnv is set, saying what the test does that takes
// long (why) and the command that runs it.
func Long(t testing.TB, why string) {
	t.Helper()
	if LongTests() {
		return
	}
	t.Skipf("long test (%s): run it with %s=1 go test -count=1 -run '%s' ./%s", why, LongEnv, runPattern(t.Name()), pkgDir())
}

// runPattern is the -run pattern that selects the test named name alone.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// pkgDir is the test's package directory relative to the module root (a
// test runs in its package's directory), or "..." where that is unknown.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "..."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return "..."
			}
			if rel == "." {
				return ""
			}
			return filepath.ToSlash(rel) + "/"
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "..."
		}
		dir = parent
	}
}
