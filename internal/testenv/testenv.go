package testenv

import (
	"os"
	"strings"
)

// Marker is set by Neutralize in the environment it leaves, so that a
// child process started with os.Environ() (whose variables the parent test
// chose) keeps them.
const Marker = "OMPALLOC_TEST_ENV_NEUTRAL"

// prefixes of the variables that change what OpenMP runtimes and ompalloc do.
var prefixes = []string{"OMP_", "OMPALLOC_", "KMP_", "LIBOMPTARGET_", "GOMP_"}

// kept are variables with those prefixes that Neutralize leaves alone
// besides where the drivers are (Kept) and the test run's own switches.
// OMPALLOC_DISABLE_* are removed: a user who turned a driver off for their
// programs has not turned it off for the tests, and the tests that load a
// fake driver must get it.
var kept = map[string]bool{
	"OMPALLOC_GPU_DRYRUN": true,
	"OMPALLOC_LEAKCHECK":  true,
	LongEnv:               true,
	Marker:                true,
}

// Kept reports whether Neutralize leaves the variable name alone. Where
// each vendor's driver is, OMPALLOC_<VENDOR>_LIBRARY (internal/dl's
// override) and OMPALLOC_REAL_<VENDOR> (the real library the GPU bundle's
// tests compare against), is a fact of the machine, kept for every vendor
// by its name's pattern: a new vendor needs no line here.
func Kept(name string) bool {
	return kept[name] || strings.HasSuffix(name, "_CHILD") || strings.HasPrefix(name, "OMPALLOC_TEST_") ||
		strings.Contains(name, "_TEST_") || strings.HasPrefix(name, "OMPALLOC_REAL_") ||
		(strings.HasPrefix(name, "OMPALLOC_") && strings.HasSuffix(name, "_LIBRARY"))
}

// Settings returns the variables Neutralize would remove from env (in
// os.Environ's "NAME=value" form), by name.
func Settings(env []string) []string {
	var names []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) && !Kept(name) {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// Neutralize removes the user's OpenMP and ompalloc settings from the
// process environment and reports true. It does nothing and reports false
// in a child process a test started: when the marker is set (the parent
// already neutralized, and what is set now the parent test set on purpose)
// or one of childEnv is. Call it first thing in TestMain.
func Neutralize(childEnv ...string) (parent bool) {
	if os.Getenv(Marker) != "" {
		return false
	}
	for _, e := range childEnv {
		if os.Getenv(e) != "" {
			return false
		}
	}
	for _, n := range Settings(os.Environ()) {
		_ = os.Unsetenv(n)
	}
	_ = os.Setenv(Marker, "1")
	return true
}

// Hostile are settings that change the library's behaviour the most: a
// test run with all of them exported must pass like one without (the
// check in .ci/run, the GPU bundle's dry run and TestNeutralize).
var Hostile = []string{
	"OMPALLOC_PINNED_LIMIT=0",
	"OMP_ALLOCATOR=omp_default_mem_space:alignment=64,pinned=true,fallback=null_fb",
	"OMP_DEFAULT_DEVICE=1",
	"OMPALLOC_HUGEPAGES=hugetlb",
	"OMPALLOC_STAGING_THRESHOLD=0",
	"OMPALLOC_STAGING_POOL=1K",
	"LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=mandatory",
	"OMP_DISPLAY_ENV=true",
}

// HostileDrivers turn the GPU drivers off: the tests that load the fake
// drivers must pass with them exported too (.ci/run). Not part of Hostile,
// which the GPU bundle's dry run exports for the CLI as well, whose bench
// needs the driver.
var HostileDrivers = []string{
	"OMPALLOC_DISABLE_CUDA=1",
	"OMPALLOC_DISABLE_HSA=1",
}
