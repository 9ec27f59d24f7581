package reliability

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// RLIMIT_MEMLOCK and RLIMIT_AS lowered while the program runs (in a child
// without CAP_IPC_LOCK, so that RLIMIT_MEMLOCK binds): pins past the new
// limit fail naming RLIMIT_MEMLOCK and its new value, allocations past the
// address-space limit fail as errors, live blocks keep their bytes, the
// fallbacks serve, and nothing is left behind.
func TestHeldRlimitsLoweredAtRunTime(t *testing.T) {
	for _, tool := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (util-linux)", tool)
		}
	}
	cmd := exec.Command("setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock",
		"prlimit", "--memlock=8388608:8388608", os.Args[0], "-test.run=^TestHeldRlimitsChild$", "-test.v", "-test.count=1")
	// RLIMIT_MEMLOCK bounds the host's mlock: pin for the host, also where
	// a GPU (or a fake one) is the default device (issue 27 item 13).
	cmd.Env = append(childEnviron(), envvar.PinnedLimit+"=", "OMP_DEFAULT_DEVICE=initial")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "setpriv:") {
		t.Skipf("setpriv cannot drop CAP_IPC_LOCK here: %s", out)
	}
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestHeldRlimitsChild", "%s", out)
}

func TestHeldRlimitsChild(t *testing.T) {
	inChild(t)
	require.False(t, procstatus.HasCapIPCLock())
	base := leakcheck.Start()
	pin, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	fb, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.DefaultMemFb))
	require.NoError(t, err)
	p, err := pin.Alloc(1 << 20)
	require.NoError(t, err)
	pattern(cmem.Bytes(uintptr(p), 1<<20), 7)

	// RLIMIT_MEMLOCK down to 64 KiB: our cap (8 MiB, from the old value)
	// lets a new chunk through, mlock refuses it by the new value.
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(rlimitMemlock, &rl))
	require.NoError(t, syscall.Setrlimit(rlimitMemlock, &syscall.Rlimit{Cur: 64 << 10, Max: 64 << 10}))
	q, err := pin.Alloc(4 << 20)
	require.Nil(t, q)
	require.ErrorIs(t, err, alloc.ErrPinFailed)
	require.ErrorContains(t, err, "RLIMIT_MEMLOCK is 65536 bytes")
	require.ErrorContains(t, err, "ulimit -l")
	q, err = fb.Alloc(4 << 20)
	require.NoError(t, err, "default_mem_fb serves unpinned")
	require.NoError(t, alloc.Free(q))
	require.True(t, holds(cmem.Bytes(uintptr(p), 1<<20), 7))

	// RLIMIT_AS down to what is mapped now plus 256 MiB: a 1 GiB block is
	// an error, small ones still work. (qemu-user keeps RLIMIT_AS for
	// itself: the guest's setrlimit of it changes nothing.)
	if why, ok := testenv.Emulated(); ok {
		t.Log("RLIMIT_AS part skipped " + why)
	} else {
		lowerAddressSpace(t, pin)
	}

	require.True(t, holds(cmem.Bytes(uintptr(p), 1<<20), 7))
	require.NoError(t, alloc.Free(p))
	require.NoError(t, pin.Destroy())
	require.NoError(t, fb.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	reportFaults(3)
}

func lowerAddressSpace(t *testing.T, pin *alloc.Allocator) {
	vm, ok := procstatus.Field("VmSize")
	require.True(t, ok)
	var as syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_AS, &as))
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: vm<<10 + 256<<20, Max: as.Max}))
	big, err := alloc.Default().Alloc(1 << 30)
	require.Nil(t, big)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	big, err = pin.Alloc(1 << 30)
	require.Nil(t, big)
	require.Error(t, err)
	require.Nil(t, kmp.Alloc(1<<30, kmp.DefaultMemAlloc), "kmp: nil and a warning")
	small, err := alloc.Default().Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, alloc.Free(small))
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &as))
}

// A signal storm (SIGUSR1 caught by the program, and SIGURG, which the Go
// runtime itself uses to preempt) while goroutines allocate, pin, lock and
// copy: every block keeps its bytes and nothing is left. In a child, whose
// signal handling the storm may change.
func TestHeldSignalStorm(t *testing.T) {
	out := runChild(t, "TestHeldSignalStormChild")
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "STORM "); ok {
			t.Log(v)
			return
		}
	}
	t.Fatalf("no STORM line from the child:\n%s", out)
}

func TestHeldSignalStormChild(t *testing.T) {
	inChild(t)
	base := leakcheck.Start()
	caught := make(chan os.Signal, 1024)
	signal.Notify(caught, syscall.SIGUSR1)
	defer signal.Stop(caught)
	pin, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	stop := make(chan struct{})
	var sent, ops atomic.Int64
	var storm, wg sync.WaitGroup
	storm.Add(1)
	go func() {
		defer storm.Done()
		pid := os.Getpid()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-caught:
			default:
			}
			sig := syscall.SIGUSR1
			if i%2 == 1 {
				sig = syscall.SIGURG
			}
			_ = syscall.Kill(pid, sig)
			sent.Add(1)
		}
	}()
	host := kmp.GetInitialDevice()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := pin
				if i%2 == 0 {
					a = alloc.Default()
				}
				n := uintptr(64 + (i%128)*256)
				p, err := a.Alloc(n)
				if err != nil {
					t.Errorf("alloc under signals: %v", err)
					return
				}
				b := cmem.Bytes(uintptr(p), n)
				pattern(b, byte(g))
				if i%8 == 0 {
					if kmp.TargetLockMem(p, n, host) == nil {
						t.Errorf("lock under signals failed")
					}
					kmp.TargetUnlockMem(p, host)
				}
				dst := make([]byte, n)
				if kmp.TargetMemcpy(unsafe.Pointer(&dst[0]), p, n, 0, 0, host, host) != 0 || !holds(dst, byte(g)) || !holds(b, byte(g)) {
					t.Errorf("bytes changed under signals")
				}
				if err := alloc.Free(p); err != nil {
					t.Errorf("free under signals: %v", err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	time.Sleep(heldDuration(t))
	close(stop)
	wg.Wait()
	storm.Wait()
	require.NoError(t, pin.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	require.Positive(t, sent.Load())
	fmt.Printf("STORM %d signals sent during %d operations\n", sent.Load(), ops.Load())
}

const rlimitMemlock = 8 // RLIMIT_MEMLOCK on Linux (not in package syscall)
