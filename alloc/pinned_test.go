package alloc

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/procstatus"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// vmLckKiB reads the locked memory of this process (linux).
func vmLckKiB(t *testing.T) int {
	t.Helper()
	n, ok := procstatus.VmLckKiB()
	if !ok {
		t.Skip("VmLck is read from /proc/self/status (Linux)")
	}
	return n
}

func isPinned(t *testing.T, p unsafe.Pointer) bool {
	d, err := target.Get(target.DefaultDevice())
	require.NoError(t, err)
	return registered(d.Registry(), uintptr(p))
}

// GCC's alloc-pinned tests: VmLck rises for pinned alloc, calloc and
// realloc, small blocks share locked pages, and it all goes when freed.
//
// VmLck counts mlock, so the memory is pinned by the host device: with a GPU
// as the default device the driver pins it (cuMemHostRegister), which VmLck
// does not show.
func TestPinnedTraitLocksMemory(t *testing.T) {
	stayOnOneNode(t)
	Trim()
	base := vmLckKiB(t)
	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(host.ID), WithAlignment(64), WithFallback(traits.NullFb))
	isPinned := func(t *testing.T, p unsafe.Pointer) bool { return registered(host.Registry(), uintptr(p)) }
	held := holdBlocks(t)

	p, err := a.Alloc(100)
	require.NoError(t, err)
	held[p] = true
	require.True(t, isPinned(t, p), "the block is in the device's registry")
	locked := vmLckKiB(t)
	require.GreaterOrEqual(t, locked, base+4, "VmLck rises")

	var small []unsafe.Pointer
	for i := 0; i < 200; i++ {
		q, err := a.Calloc(10, 10)
		require.NoError(t, err)
		held[q] = true
		require.Zero(t, uintptr(q)%64)
		require.Equal(t, make([]byte, 100), unsafe.Slice((*byte)(q), 100))
		small = append(small, q)
	}
	require.Equal(t, locked, vmLckKiB(t), "small pinned blocks share the locked chunk")

	r, err := a.Realloc(p, 3<<20) // a block of its own, locked too
	require.NoError(t, err)
	delete(held, p)
	held[r] = true
	require.True(t, isPinned(t, r))
	require.GreaterOrEqual(t, vmLckKiB(t), locked+3<<10)
	st := a.Stats()
	require.Equal(t, int64(201), st.BlocksLive)
	require.NotZero(t, st.PinnedBytes)
	require.NotZero(t, ReadPinnedStats().Locks)

	held.free(t, r)
	for _, q := range small {
		held.free(t, q)
	}
	require.NoError(t, a.Destroy(), "destroying trims the pinned heap")
	Trim()
	require.Equal(t, base, vmLckKiB(t), "VmLck returns to its baseline")
}

func TestPinnedFalsePinsNothing(t *testing.T) {
	base := vmLckKiB(t)
	a := mustNew(t, memspace.Default, WithPinned(false))
	p, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	require.False(t, isPinned(t, p))
	require.Equal(t, base, vmLckKiB(t))
	require.NoError(t, Free(p))
}

func TestPinnedFreedThroughAnyHandle(t *testing.T) {
	a := mustNew(t, memspace.Default, WithPinned(true))
	p, err := a.Alloc(5 << 20)
	require.NoError(t, err)
	require.True(t, isPinned(t, p))
	require.NoError(t, Default().Free(p), "any handle frees it, the null allocator's too")
	require.ErrorIs(t, Free(p), ErrDoubleFree)
}

func TestPinDeviceMustExist(t *testing.T) {
	_, err := New(memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()+5))
	require.ErrorIs(t, err, ErrInvalidTrait)
	require.ErrorContains(t, err, "pin_device")
}

// The RLIMIT_MEMLOCK tests run in a child without CAP_IPC_LOCK (root
// ignores the limit otherwise) and with a 64 KiB limit.
func TestPinnedUnderMemlockLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("setpriv and prlimit are Linux tools")
	}
	for _, tool := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (util-linux)", tool)
		}
	}
	for _, tc := range []struct{ name, limitEnv string }{
		{"our limit follows RLIMIT_MEMLOCK", ""},
		{"mlock itself refuses", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock",
				"prlimit", "--memlock=65536:65536", os.Args[0], "-test.run=^TestPinnedChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=memlock", envvar.PinnedLimit+"="+tc.limitEnv)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestPinnedChild")
		})
	}
}

func TestPinnedChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "memlock" {
		t.Skip("run by TestPinnedUnderMemlockLimit in a child process")
	}
	nullFb, err := New(memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	require.NoError(t, err)
	n := uintptr(8000)
	if os.Getenv(envvar.PinnedLimit) == "0" {
		// No limit of ours: mlock of the 4 MiB chunk meets RLIMIT_MEMLOCK.
		p, err := nullFb.Alloc(1000)
		require.ErrorIs(t, err, ErrPinFailed)
		require.Nil(t, p)
		t.Log(err)
		require.ErrorContains(t, err, "RLIMIT_MEMLOCK")
	} else {
		// Our limit is RLIMIT_MEMLOCK, 64 KiB: the chunk is locked only that
		// far, so small blocks are served pinned and larger ones refused.
		p, err := nullFb.Alloc(1000)
		require.NoError(t, err)
		require.True(t, isPinned(t, p))
		require.Equal(t, 64, vmLckKiB(t))
		big, err := nullFb.Alloc(200 << 10)
		require.ErrorIs(t, err, ErrPinFailed)
		require.Nil(t, big)
		t.Log(err)
		require.ErrorContains(t, err, "pinned-memory limit of 65536 bytes")
		require.NoError(t, Free(p))
		Trim()
		n = 200 << 10
	}

	defFb, err := New(memspace.Default, WithPinned(true), WithFallback(traits.DefaultMemFb))
	require.NoError(t, err)
	q, err := defFb.Calloc(n/8, 8)
	require.NoError(t, err, "default_mem_fb gives unpinned memory")
	require.Equal(t, make([]byte, n), unsafe.Slice((*byte)(q), n))
	o, err := ownerOf(q)
	require.NoError(t, err)
	require.Equal(t, handle(predef.DefaultMem), o.handle())
	require.False(t, isPinned(t, q))
	require.Equal(t, uint64(1), defFb.Stats().Fallbacks)
	require.Zero(t, vmLckKiB(t), "nothing stayed locked")
	require.NoError(t, Free(q))
	require.NoError(t, nullFb.Destroy())
	require.NoError(t, defFb.Destroy())
	_, used := pinnedLimit()
	require.Zero(t, used, "no pinned bytes leaked")
}

func TestPinnedAbortFallbackPanics(t *testing.T) {
	Trim() // no cached locked chunk may serve the block
	old := SetPinnedLimit(1)
	defer SetPinnedLimit(old)
	a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.AbortFb))
	msg := func() (msg any) {
		defer func() { msg = recover() }()
		_, _ = a.Alloc(1000)
		return nil
	}()
	require.NotNil(t, msg, "abort_fb panics")
	require.Contains(t, msg, "abort_fb")
	require.Contains(t, msg, "pinned-memory limit")
}
