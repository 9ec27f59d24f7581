package amdgpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// childEnv names the test a re-executed test binary is to run for real.
const childEnv = "AMDGPU_TEST_CHILD"

// fakePath is the fake runtime TestMain built, "" when gcc is missing.
var fakePath string

// TestMain builds the fake runtime and points OMPALLOC_HSA_LIBRARY at it
// before any plugin loads (the fake reads its FAKEHSA_* settings at
// hsa_init). Children re-executed for another environment inherit it.
func TestMain(m *testing.M) {
	testenv.Neutralize(childEnv)
	if os.Getenv(childEnv) == "" {
		p, err := fakedrv.BuildPath("fakehsa")
		switch {
		case err == nil:
			fakePath = p
			os.Setenv("OMPALLOC_HSA_LIBRARY", p)
		case errors.Is(err, fakedrv.ErrNoCompiler):
			// tests needing the fake skip
		default:
			fmt.Fprintln(os.Stderr, "building the fake HSA runtime:", err)
			os.Exit(1)
		}
	} else {
		fakePath = os.Getenv("OMPALLOC_HSA_LIBRARY")
	}
	code := m.Run()
	if code == 0 && os.Getenv(childEnv) == "" && fakePath != "" {
		if err := driverLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needFake skips without gcc.
func needFake(t *testing.T) {
	t.Helper()
	if fakePath == "" {
		t.Skip("the fake HSA runtime needs gcc")
	}
}

// fakePlugin is a fresh plugin, initialised, on the fake runtime.
func fakePlugin(t *testing.T) *Plugin {
	t.Helper()
	needFake(t)
	p := New().(*Plugin)
	require.NoError(t, p.Init())
	return p
}

// fakeDevices returns the devices of a fresh plugin and closes them at the
// end of the test.
func fakeDevices(t *testing.T) []*device {
	t.Helper()
	p := fakePlugin(t)
	var ds []*device
	for _, d := range p.Devices() {
		ds = append(ds, d.(*device))
	}
	t.Cleanup(func() {
		for _, d := range ds {
			require.NoError(t, d.Close())
		}
	})
	return ds
}

// count asks the fake how many of what it holds: "signals", "allocs",
// "locks", "pending", "copies", "due".
func count(t testing.TB, what string) int64 {
	t.Helper()
	h, err := purego.Dlopen(fakePath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(h, "fakehsa_count")
	require.NoError(t, err)
	s := append([]byte(what), 0)
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&s[0])))
	n := int64(r)
	require.GreaterOrEqual(t, n, int64(0), "fakehsa_count(%q)", what)
	return n
}

// inChild re-runs test name in a child process with env added, and reports
// whether this process is that child. The parent fails if the child fails.
func inChild(t *testing.T, name string, env ...string) bool {
	t.Helper()
	if os.Getenv(childEnv) == name {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child %s (%v):\n%s", name, env, out)
	require.Contains(t, string(out), "--- PASS: "+name, "child %s did not run:\n%s", name, out)
	return false
}

// hostBuffer is n bytes of C memory (pageable, not locked), freed at the
// end of the test.
func hostBuffer(t testing.TB, n uintptr) uintptr {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() {
		// A test that failed may leave copies in flight into p: let the
		// fake's copy engines finish before the memory goes.
		if fakePath != "" {
			drain(t)
		}
		require.NoError(t, c.Unmap(p, n))
	})
	return p
}

var _ plugin.Plugin = (*Plugin)(nil)

// drain waits until the fake's engines have performed every copy submitted.
func drain(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); count(t, "pending") > 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the fake's copies never completed")
	}
}
