package leakcheck

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

func TestMain(m *testing.M) {
	testenv.Neutralize("LEAKCHECK_TEST_LEAKY")
	Main(m)
}

func leakyHelper(t *testing.T, a *alloc.Allocator) unsafe.Pointer {
	p, err := a.Alloc(123)
	require.NoError(t, err)
	return p
}

// The check sees a live block, names its allocator and, in leak-check
// mode, the function that allocated it; once freed, it passes.
func TestCheckFindsLeakedBlockAndItsStack(t *testing.T) {
	base := Start()
	require.NoError(t, base.Check())
	was := alloc.SetLeakCheck(true)
	defer alloc.SetLeakCheck(was)

	a, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	p := leakyHelper(t, a)
	err = base.Check()
	require.Error(t, err)
	require.Contains(t, err.Error(), a.String()+": 1 blocks (123 bytes) still allocated")
	require.Contains(t, err.Error(), "leakcheck.leakyHelper")
	require.Contains(t, err.Error(), "leakcheck_test.go")
	require.NotContains(t, err.Error(), envvar.LeakCheck+"=1", "every block has its stack")
	var mine []alloc.Live
	for _, l := range alloc.LiveBlocks() {
		if l.Allocator == a.String() {
			mine = append(mine, l)
		}
	}
	require.Len(t, mine, 1)
	require.Len(t, mine[0].Stacks, 1)
	require.True(t, strings.HasPrefix(mine[0].Stacks[0], fmt.Sprintf("%#x, 123 bytes\n", uintptr(p))), mine[0].Stacks[0])

	require.NoError(t, alloc.Free(p))
	for _, l := range alloc.LiveBlocks() {
		require.NotEqual(t, a.String(), l.Allocator, "the freed block's allocator has none live")
	}
	require.NoError(t, base.Check())
	require.NoError(t, a.Destroy())
}

// Without leak-check mode there is no stack, and the message says how to
// get one.
func TestCheckSuggestsLeakCheckMode(t *testing.T) {
	base := Start()
	was := alloc.SetLeakCheck(false)
	defer alloc.SetLeakCheck(was)
	p, err := alloc.Default().Alloc(10)
	require.NoError(t, err)
	err = base.Check()
	require.ErrorContains(t, err, envvar.LeakCheck+"=1")
	require.NoError(t, alloc.Free(p))
	require.NoError(t, base.Check())
}

// A lock left in a device's registry and pinned bytes still held are leaks.
func TestCheckFindsRegistryEntriesAndPinnedBytes(t *testing.T) {
	base := Start()
	d, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	buf, err := alloc.New(memspace.Default)
	require.NoError(t, err)
	defer func() { require.NoError(t, buf.Destroy()) }()
	p, err := buf.Alloc(1 << 16)
	require.NoError(t, err)
	_, err = d.LockMem(uintptr(p), 1<<16)
	require.NoError(t, err)
	err = base.Check()
	require.ErrorContains(t, err, "registry entries still held")
	require.NoError(t, d.UnlockMem(uintptr(p)))
	require.NoError(t, alloc.Free(p))

	pa, err := alloc.New(memspace.Default, alloc.WithPinned(true))
	require.NoError(t, err)
	q, err := pa.Alloc(100)
	require.NoError(t, err)
	err = base.Check()
	require.ErrorContains(t, err, "still allocated")
	require.ErrorContains(t, err, "pinned bytes still counted")
	require.NoError(t, alloc.Free(q))
	require.NoError(t, pa.Destroy())
	require.NoError(t, base.Check())
}

// The whole mechanism: a test binary whose tests pass but leak a block
// exits 1 from Main, printing the allocation stack in leak-check mode.
func TestMainFailsARunThatLeaks(t *testing.T) {
	if os.Getenv("LEAKCHECK_TEST_LEAKY") != "" {
		t.Skip("the child runs TestLeakyChild")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakyChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LEAKCHECK_TEST_LEAKY=1", envvar.LeakCheck+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 1, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "omp_default_mem_alloc: 1 blocks (77 bytes) still allocated")
	require.Contains(t, string(out), "leakcheck.TestLeakyChild")
	require.Contains(t, string(out), "FAIL: leaks after the tests passed")
}

func TestLeakyChild(t *testing.T) {
	if os.Getenv("LEAKCHECK_TEST_LEAKY") == "" {
		t.Skip("run by TestMainFailsARunThatLeaks in a child process")
	}
	_, err := alloc.Default().Alloc(77) // leaked on purpose
	require.NoError(t, err)
}
