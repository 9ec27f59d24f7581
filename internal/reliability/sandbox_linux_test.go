package reliability

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/pcpu"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
)

// The numbers a seccomp filter needs, per architecture.
var seccompArch = map[string]struct {
	audit                 uint32 // AUDIT_ARCH_*
	seccompNr, membarrier uintptr
}{
	"amd64": {0xc000003e, 317, 324},
	"arm64": {0xc00000b7, 277, 283},
}

// denyMembarrier installs, on every thread of the process (TSYNC), a
// seccomp filter that makes membarrier(2) fail with EPERM, as a service
// that sandboxes itself after start does. Raw system calls, no library.
func denyMembarrier() error {
	nr, ok := seccompArch[runtime.GOARCH]
	if !ok {
		return errors.New("no seccomp numbers for " + runtime.GOARCH)
	}
	type sockFilter struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	const (
		ldAbs    = 0x20 // BPF_LD | BPF_W | BPF_ABS
		jeqK     = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
		retK     = 0x06 // BPF_RET | BPF_K
		retErrno = 0x00050000
		retAllow = 0x7fff0000
	)
	prog := []sockFilter{
		{ldAbs, 0, 0, 4},                    // seccomp_data.arch
		{jeqK, 0, 3, nr.audit},              // another ABI: allow
		{ldAbs, 0, 0, 0},                    // seccomp_data.nr
		{jeqK, 0, 1, uint32(nr.membarrier)}, // not membarrier: allow
		{retK, 0, 0, retErrno | uint32(syscall.EPERM)},
		{retK, 0, 0, retAllow},
	}
	fprog := struct {
		len    uint16
		filter *sockFilter
	}{uint16(len(prog)), &prog[0]}
	const prSetNoNewPrivs, setModeFilter, flagTSync = 38, 1, 1
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return errors.New("prctl(PR_SET_NO_NEW_PRIVS): " + e.Error())
	}
	r, _, e := syscall.RawSyscall(nr.seccompNr, setModeFilter, flagTSync, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return errors.New("seccomp(SECCOMP_SET_MODE_FILTER): " + e.Error())
	}
	if r != 0 {
		return errors.New("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread " + strconv.Itoa(int(r)) + " could not be synchronised")
	}
	// The filter must now deny the call (under qemu-user it filters the
	// host's system calls, another ABI, and lets it through).
	if _, _, e := syscall.RawSyscall(nr.membarrier, 0, 0, 0); e != syscall.EPERM {
		return errors.New("the filter is installed but membarrier(MEMBARRIER_CMD_QUERY) still answers (" + errnoString(e) + "): not a kernel that filters this ABI (qemu-user?)")
	}
	return nil
}

func errnoString(e syscall.Errno) string {
	if e == 0 {
		return "no error"
	}
	return e.Error()
}

// Issue 23 item 3: a service that installs a seccomp filter after start
// denies membarrier(2); every Destroy, kmp.DestroyAllocator and last Free
// of a destroyed allocator then panicked ("membarrier ... failed after
// registration: operation not permitted"). The runtime must fall back to a
// correct protocol and keep every count right.
func TestSandboxDeniesMembarrier(t *testing.T) {
	if !pcpu.HasBarrier {
		t.Skip("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is not registered here (not Linux, an old kernel or emulator, or a race build): nothing for a sandbox to take away")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxDeniesMembarrierChild$", "-test.v", "-test.count=1")
	cmd.Env = childEnviron()
	out, err := cmd.CombinedOutput()
	if i := strings.Index(string(out), "NOSECCOMP: "); i >= 0 {
		t.Skip("seccomp filters are unavailable here: " + strings.SplitN(string(out[i+len("NOSECCOMP: "):]), "\n", 2)[0])
	}
	require.NoError(t, err, "the child exited abnormally:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestSandboxDeniesMembarrierChild", "the child did not pass:\n%s", out)
	if i := strings.Index(string(out), "DESTROY "); i >= 0 {
		t.Log(strings.SplitN(string(out[i:]), "\n", 2)[0])
	}
}

// destroyCost is the median time of New and Destroy of an allocator that
// allocated and freed one block (Destroy runs pcpu.Barrier once).
func destroyCost(t *testing.T) time.Duration {
	const n = 21
	ds := make([]time.Duration, n)
	for i := range ds {
		a, err := alloc.New(memspace.Default)
		require.NoError(t, err)
		p, err := a.Alloc(64)
		require.NoError(t, err)
		require.NoError(t, alloc.Free(p))
		start := time.Now()
		require.NoError(t, a.Destroy())
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds[n/2]
}

func TestSandboxDeniesMembarrierChild(t *testing.T) {
	inChild(t)
	require.True(t, pcpu.HasBarrier, "the parent checked")
	// Set up before the sandbox: a pooled allocator with live blocks, an
	// empty one, one made through kmp with a live block.
	live, err := alloc.New(memspace.Default, alloc.WithPoolSize(8<<20))
	require.NoError(t, err)
	small, err := live.Alloc(100)
	require.NoError(t, err)
	medium, err := live.Alloc(1 << 20)
	require.NoError(t, err)
	empty, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	p, err := empty.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, alloc.Free(p))
	kh := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{{Key: kmp.AtkAlignment, Value: 64}})
	require.NotEqual(t, kmp.NullAllocator, kh)
	kp := kmp.Alloc(4000, kh)
	require.NotNil(t, kp)

	withBarrier := destroyCost(t)
	if err := denyMembarrier(); err != nil {
		os.Stdout.WriteString("NOSECCOMP: " + err.Error() + "\n")
		require.NoError(t, alloc.Free(small))
		require.NoError(t, alloc.Free(medium))
		require.NoError(t, live.Destroy())
		require.NoError(t, empty.Destroy())
		kmp.Free(kp, kh)
		kmp.DestroyAllocator(kh)
		t.Skip(err)
	}

	require.NotPanics(t, func() {
		require.NoError(t, empty.Destroy())
		require.ErrorIs(t, live.Destroy(), alloc.ErrLiveBlocks)
		require.NoError(t, alloc.Free(small))
		require.NoError(t, alloc.Free(medium)) // the last block: releases live
		kmp.Free(kp, kh)
		kmp.DestroyAllocator(kh)
	})
	require.ErrorIs(t, pcpu.BarrierRefused(), syscall.EPERM, "the fallback was taken")
	// What the fallback costs: a Destroy waits for a collection instead
	// of membarrier (the figure in RELIABILITY.md, promise 7).
	fmt.Printf("DESTROY median %v with membarrier, %v with the stop-the-world fallback\n", withBarrier, destroyCost(t))
	st := live.Stats()
	require.Equal(t, alloc.Stats{Allocs: 2, Frees: 2, PoolSize: 8 << 20}, alloc.Stats{Allocs: st.Allocs, Frees: st.Frees, BlocksLive: st.BlocksLive, BytesLive: st.BytesLive, PoolSize: st.PoolSize, PoolUsed: st.PoolUsed})
	for _, l := range alloc.LiveBlocks() {
		require.NotEqual(t, live.String(), l.Allocator, "the destroyed allocator was released: %+v", l)
	}

	// Destroy racing allocations and frees on other goroutines, a few
	// rounds: every allocation either counted before Destroy looked or
	// refused; nothing is left.
	for round := 0; round < 10; round++ {
		a, err := alloc.New(memspace.Default)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					q, err := a.Alloc(64)
					if err != nil {
						if !errors.Is(err, alloc.ErrDestroyed) {
							t.Errorf("alloc: %v", err)
						}
						return
					}
					runtime.Gosched()
					if err := alloc.Free(q); err != nil {
						t.Errorf("free: %v", err)
						return
					}
				}
			}()
		}
		runtime.Gosched()
		var derr error
		require.NotPanics(t, func() { derr = a.Destroy() })
		if derr != nil {
			require.ErrorIs(t, derr, alloc.ErrLiveBlocks) // the frees release it
		}
		wg.Wait()
		st := a.Stats()
		require.Zero(t, st.BlocksLive, "round %d: %+v", round, st)
		require.Equal(t, st.Allocs, st.Frees, "round %d", round)
	}
	alloc.Trim()
	require.Empty(t, alloc.LiveBlocks())
}
