package reliability

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/target"
)

// childEnv marks a re-executed test binary that runs one test in a process
// of its own: devices are discovered once per process, and the drivers'
// environment is read at load.
const childEnv = "OMPALLOC_RELIABILITY_CHILD"

// faultsSurvived counts the faults the tests of this process injected and
// recovered from; children report theirs on a "FAULTS n" line.
var faultsSurvived atomic.Int64

func survived(n int) { faultsSurvived.Add(int64(n)) }

// runChild re-runs the test binary for test alone with env added, checks
// that it ran, passed and exited normally, and returns its output. The
// faults the child reports are added to this process's count.
func runChild(t *testing.T, test string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(childEnviron(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child %s exited abnormally:\n%s", test, out)
	require.Contains(t, string(out), "--- PASS: "+test, "child %s did not pass:\n%s", test, out)
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "FAULTS "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			survived(n)
		}
	}
	return string(out)
}

// inChild skips t unless it runs in a child started by runChild.
func inChild(t *testing.T) {
	t.Helper()
	if os.Getenv(childEnv) == "" {
		t.Skip("runs in a child process started by its parent test")
	}
}

// reportFaults prints the child's count for its parent.
func reportFaults(n int) { fmt.Printf("FAULTS %d\n", n) }

// pattern fills b from seed; check reports whether b still holds it.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*131>>3) ^ seed
	}
}

func holds(b []byte, seed byte) bool {
	for i := range b {
		if b[i] != byte(i*131>>3)^seed {
			return false
		}
	}
	return true
}

func bytesAt(p unsafe.Pointer, n uintptr) []byte { return cmem.Bytes(uintptr(p), n) }

// hostBuf maps n bytes of ordinary host memory that this runtime did not
// allocate (foreign to it).
func hostBuf(t testing.TB, n uintptr) uintptr {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Unmap(p, n) })
	return p
}

func vmLck() int {
	n, _ := leakcheck.VmLckKiB()
	return n
}

// state is what the leak checks compare before and after a test step.
type state struct {
	Live       int64
	PinnedUsed uintptr
	Registry   []int // entries per device
	InUse      []uintptr
	VmLck      int
}

func snapshot() state {
	alloc.Trim()
	var s state
	for _, l := range alloc.LiveBlocks() {
		s.Live += l.Blocks
	}
	s.PinnedUsed = alloc.ReadPinnedStats().Used
	for _, d := range target.Devices() {
		s.Registry = append(s.Registry, d.Registry().Stats().Entries)
		s.InUse = append(s.InUse, d.StagingStats().InUseBytes)
	}
	s.VmLck = vmLck()
	return s
}

func requireSame(t *testing.T, want state, what string) {
	t.Helper()
	got := snapshot()
	require.Equal(t, want, got, "%s: back to baseline (live blocks: %v)", what, alloc.LiveBlocks())
}

func splitLines(s string) []string { return strings.Split(s, "\n") }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func cmem2ptr(p uintptr) unsafe.Pointer { return cmem.Ptr(p) }

// childEnviron is the environment of a child: this one, marked, and with
// the race detector's one-second sleep at exit turned off.
func childEnviron() []string {
	env := append(os.Environ(), childEnv+"=1")
	if raceEnabled {
		env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return env
}
