//go:build linux && (amd64 || arm64)

package reliability

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// kernelSigaction is struct sigaction as the rt_sigaction system call
// reads and writes it on linux/amd64 and linux/arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// dispositions reads every signal's handler and flags straight from the
// kernel (a C library loaded through purego could install a handler
// without Go knowing), plus Go's view (signal.Ignored) and the process's
// caught and ignored masks.
func dispositions(t *testing.T) (acts map[int]kernelSigaction, ignored map[int]bool, masks string) {
	t.Helper()
	acts, ignored = map[int]kernelSigaction{}, map[int]bool{}
	for sig := 1; sig <= 64; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
		if e != 0 {
			continue // a signal the kernel reserves
		}
		acts[sig] = old
		ignored[sig] = signal.Ignored(syscall.Signal(sig))
	}
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SigCgt:") || strings.HasPrefix(l, "SigIgn:") {
			masks += l + "\n"
		}
	}
	return acts, ignored, masks
}

// changedDispositions runs f and lists what changed.
func changedDispositions(t *testing.T, f func()) []string {
	t.Helper()
	acts, ign, masks := dispositions(t)
	f()
	acts2, ign2, masks2 := dispositions(t)
	var diffs []string
	if masks != masks2 {
		diffs = append(diffs, "masks: "+masks+" -> "+masks2)
	}
	for sig, a := range acts {
		if a.handler != acts2[sig].handler || a.flags != acts2[sig].flags || ign[sig] != ign2[sig] {
			diffs = append(diffs, fmt.Sprintf("signal %d: handler %#x flags %#x ignored %v -> handler %#x flags %#x ignored %v",
				sig, a.handler, a.flags, ign[sig], acts2[sig].handler, acts2[sig].flags, ign2[sig]))
		}
	}
	return diffs
}

func requireSameDispositions(t *testing.T, f func()) {
	t.Helper()
	// The check itself must be able to fail: ignoring a signal shows.
	diffs := changedDispositions(t, func() { signal.Ignore(syscall.SIGUSR2) })
	require.NotEmpty(t, diffs, "ignoring SIGUSR2 is seen")
	signal.Reset(syscall.SIGUSR2)
	require.Empty(t, changedDispositions(t, f), "the runtime changed signal dispositions")
}
