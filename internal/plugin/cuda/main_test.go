package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// childEnv marks a re-executed test binary running one test with its own
// environment (the driver's state is per process).
const childEnv = "OMPALLOC_CUDA_TEST_CHILD"

var (
	fakeLib string // the built fake libcuda, "" when it could not be built
	fakeErr error
)

func TestMain(m *testing.M) {
	testenv.Neutralize(childEnv)
	child := os.Getenv(childEnv) != ""
	if child {
		fakeLib = os.Getenv("OMPALLOC_CUDA_LIBRARY")
	} else {
		// The fake's own switch for an older driver: the tests here expect
		// memory pools (a child sets what it needs).
		_ = os.Unsetenv("FAKECUDA_NO_MEMPOOLS")
		fakeLib, fakeErr = fakedrv.BuildPath("fakecuda")
		if fakeErr == nil {
			// Before the first use of the package's driver: every New() plugin
			// of this process loads the fake.
			_ = os.Setenv("OMPALLOC_CUDA_LIBRARY", fakeLib)
		} else {
			fakeLib = ""
			_ = os.Setenv("OMPALLOC_DISABLE_CUDA", "1")
		}
	}
	code := m.Run()
	if shared != nil {
		// The shared devices keep idle streams for synchronous copies.
		for _, d := range shared.devices {
			if err := d.Close(); err != nil && code == 0 {
				fmt.Fprintln(os.Stderr, "FAIL: closing the shared devices:", err)
				code = 1
			}
		}
	}
	if code == 0 && !child && fakeLib != "" {
		if err := driverLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needFake skips t when the fake driver could not be built.
func needFake(t *testing.T) {
	t.Helper()
	if errors.Is(fakeErr, fakedrv.ErrNoCompiler) {
		t.Skipf("fake CUDA driver not built: %v", fakeErr)
	}
	require.NoError(t, fakeErr, "building the fake CUDA driver")
	require.NotEmpty(t, fakeLib)
}

var (
	shared     *cudaPlugin
	sharedOnce sync.Once
)

// fake returns the process's plugin over the fake driver (2 devices),
// initialised once and shared by the tests; they leave no state behind.
func fake(t *testing.T) *cudaPlugin {
	t.Helper()
	needFake(t)
	sharedOnce.Do(func() { shared = newPlugin(defaultDriver) })
	require.NoError(t, shared.Init())
	require.Len(t, shared.Devices(), 2)
	return shared
}

func dev(t *testing.T, i int) *device {
	t.Helper()
	return fake(t).devices[i]
}

// hookFn is the address of a test hook of the fake (fakecuda_calls,
// fakecuda_live); the fake is already loaded, so this opens the same handle.
func hookFn(t *testing.T, name string) uintptr {
	t.Helper()
	needFake(t)
	lib, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{fakeLib}})
	require.NoError(t, err)
	fn, err := lib.Sym(name)
	require.NoError(t, err)
	return fn
}

// calls is how many times the fake's API function name has run.
func calls(t *testing.T, name string) int {
	b := append([]byte(name), 0)
	return int(call(hookFn(t, "fakecuda_calls"), uintptr(unsafe.Pointer(&b[0]))))
}

// Kinds of the fake's fakecuda_live hook.
const (
	liveDevice = iota
	liveManaged
	liveHostAlloc
	liveRegistered
	liveStreams
)

func live(t *testing.T, kind int) int { return int(call(hookFn(t, "fakecuda_live"), uintptr(kind))) }

// hostBuf maps n bytes of ordinary (pageable, non-Go) host memory.
func hostBuf(t *testing.T, n uintptr) (uintptr, []byte) {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() {
		// A test that failed may leave copies queued, even held at a gate,
		// that read or write p: the fake's workers (threads Go does not
		// know, so a fault there kills the binary without a trace) must be
		// done with it before it is unmapped.
		drainFake()
		_ = c.Unmap(p, n)
	})
	return p, cmem.Bytes(p, n)
}

// drainFake opens the fake driver's gates and waits for every stream's
// queued work, where the fake is the library loaded (not under the real
// driver's test).
func drainFake() {
	if fakeLib == "" {
		return
	}
	lib, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{fakeLib}})
	if err != nil {
		return
	}
	if fn, err := lib.Sym("fakecuda_drain"); err == nil {
		call(fn)
	}
}

// runChild re-runs the test binary for test alone, with env added, and
// checks that the test ran and passed there.
func runChild(t *testing.T, test string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child %s:\n%s", test, out)
	require.Contains(t, string(out), "--- PASS: "+test, "child %s did not pass:\n%s", test, out)
	return string(out)
}

// inChild skips t unless it runs in a child started by runChild.
func inChild(t *testing.T) {
	t.Helper()
	if os.Getenv(childEnv) == "" {
		t.Skip("runs in a child process started by its parent test")
	}
}

// pattern fills b with bytes derived from seed.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

func requireCode(t *testing.T, err error, call string, code int, name string) {
	t.Helper()
	require.Error(t, err)
	var e *Error
	require.True(t, errors.As(err, &e), "error %q is not a *cuda.Error", err)
	require.Equal(t, call, e.Call)
	require.Equal(t, code, e.Code)
	require.Equal(t, name, e.Name)
	require.True(t, errors.Is(err, codeErr(code)), "errors.Is by code")
	require.Contains(t, err.Error(), fmt.Sprintf("%s: %s (%d)", call, name, code))
}

var _ plugin.Impl = (*device)(nil)
var _ plugin.QueueImpl = (*Queue)(nil)
