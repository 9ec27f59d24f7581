package heap

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/pcpu"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// Issue 23 item 10: the in-flight marks and the publication of a span's
// state must be sync/atomic stores (right by Go's memory model on every
// architecture), not plain stores right only by x86's store order. This
// reads the machine code of this test binary: the guarded allocation paths
// must store their marks (mark.go) and the span state (publish) with the
// architecture's atomic store, XCHG on amd64 and STLR on arm64. Before the
// fix AllocGuarded had no atomic store at all.
func TestMarksAndPublishAreAtomicInMachineCode(t *testing.T) {
	if pcpu.RaceEnabled {
		t.Skip("race builds take the atomic-add paths; the machine code differs")
	}
	testenv.Long(t, "builds and disassembles this package's test binary")
	atomicStore := map[string]*regexp.Regexp{
		"amd64": regexp.MustCompile(`\sXCHG[LQ]\s`),
		"arm64": regexp.MustCompile(`\sSTLRW?\s`),
	}[runtime.GOARCH]
	if atomicStore == nil {
		t.Skipf("no atomic-store pattern for %s", runtime.GOARCH)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to disassemble with: ", err)
	}
	// go test strips the binary it runs; build one with symbols (cached).
	exe := t.TempDir() + "/heap.test"
	build := exec.Command(goTool, "test", "-c", "-o", exe, ".")
	build.Env = append(os.Environ(), "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("building the test binary to disassemble: %v: %s", err, out)
	}
	for _, tc := range []struct {
		fn             string
		marks, publish int // atomic stores from mark.go, and from sync/atomic (the span state)
	}{
		{"AllocGuarded", 2, 0},
		{"allocSpanGuarded", 2, 1},
	} {
		out, err := exec.Command(goTool, "tool", "objdump", "-s", `heap\.\(\*Heap\)\.`+tc.fn+`$`, exe).CombinedOutput()
		if err != nil {
			t.Skipf("go tool objdump: %v: %s", err, out)
		}
		marks, publish := 0, 0
		for _, l := range strings.Split(string(out), "\n") {
			if !atomicStore.MatchString(l) {
				continue
			}
			switch f := strings.Fields(l); {
			case strings.HasPrefix(f[0], "mark.go:"):
				marks++
			case strings.HasPrefix(f[0], "type.go:"), strings.HasPrefix(f[0], "publish_atomic.go:"):
				publish++
			}
		}
		require.GreaterOrEqual(t, marks, tc.marks, "%s: the mark and unmark are atomic stores:\n%s", tc.fn, out)
		require.GreaterOrEqual(t, publish, tc.publish, "%s: the span state is published with an atomic store:\n%s", tc.fn, out)
	}
}
