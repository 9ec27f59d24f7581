//go:build linux && (amd64 || arm64)

package numa_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

func mapRange(t *testing.T, n int) ([]byte, uintptr) {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return b, uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// needMempolicy skips when the kernel does not implement the memory-policy
// calls: ENOSYS from a kernel built without CONFIG_NUMA, and from qemu-user,
// which runs the arm64 suite in CI. What the tests check is then not there.
func needMempolicy(t *testing.T) {
	t.Helper()
	if !numa.Supported() {
		t.Skip("no memory-policy calls here (CONFIG_NUMA off, or qemu-user): get_mempolicy is ENOSYS")
	}
}

// numaMapsPolicy returns the policy word /proc/self/numa_maps shows for the
// mapping starting at p.
func numaMapsPolicy(t *testing.T, p uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/numa_maps")
	if err != nil {
		t.Skipf("no /proc/self/numa_maps: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == fmt.Sprintf("%x", p) {
			return f[1]
		}
	}
	t.Fatalf("no mapping at %#x in numa_maps", p)
	return ""
}

// TestApplyReachesTheKernel binds fresh ranges with every partition on this
// machine's nodes and reads the policy back twice: get_mempolicy(MPOL_F_ADDR)
// and /proc/self/numa_maps. Touched pages land on an allowed node
// (move_pages).
func TestApplyReachesTheKernel(t *testing.T) {
	needMempolicy(t)
	top := numa.System()
	all := top.IDs()
	n0 := all[0]
	cases := []struct {
		spec     numa.Spec
		mode     numa.Mode
		nodes    []int
		numaMaps string
	}{
		{numa.Spec{Partition: numa.Environment}, numa.ModeDefault, nil, "default"},
		{numa.Spec{Partition: numa.Nearest}, numa.ModeLocal, nil, "local"},
		{numa.Spec{Partition: numa.Nearest, Nodes: []int{n0}}, numa.ModePreferred, []int{n0}, fmt.Sprintf("prefer:%d", n0)},
		{numa.Spec{Partition: numa.Blocked, Nodes: []int{n0}}, numa.ModeBind, []int{n0}, fmt.Sprintf("bind:%d", n0)},
		{numa.Spec{Partition: numa.Interleaved, Nodes: []int{n0, n0}}, numa.ModeBind, []int{n0}, fmt.Sprintf("bind:%d", n0)},
	}
	if len(all) > 1 {
		cases = append(cases, struct {
			spec     numa.Spec
			mode     numa.Mode
			nodes    []int
			numaMaps string
		}{numa.Spec{Partition: numa.Interleaved}, numa.ModeInterleave, all, "interleave:" + numa.FormatList(all)})
	}
	for _, c := range cases {
		t.Run(c.numaMaps, func(t *testing.T) {
			const n = 4 * mib
			b, p := mapRange(t, n)
			// Small pages only: under THP a 2 MiB-aligned range is faulted
			// in 2 MiB at a time, and touching both ends would populate
			// the middle page the test expects to find missing.
			require.NoError(t, syscall.Madvise(b, syscall.MADV_NOHUGEPAGE))
			plan := numa.Plan(n, uintptr(os.Getpagesize()), c.spec, all)
			require.NoError(t, numa.Apply(p, plan))
			mode, nodes, err := numa.GetPolicy(p)
			require.NoError(t, err)
			require.Equal(t, c.mode, mode)
			if c.mode != numa.ModeDefault && c.mode != numa.ModeLocal {
				require.Equal(t, c.nodes, nodes)
			}
			require.Equal(t, c.numaMaps, numaMapsPolicy(t, p))

			// Touch the first and last page: they land on an allowed node.
			b[0], b[n-1] = 1, 1
			got, err := numa.PageNodes([]uintptr{p, p + n - 1, p + n/2})
			require.NoError(t, err)
			allowed := c.nodes
			if allowed == nil {
				allowed = all
			}
			require.Contains(t, allowed, got[0])
			require.Contains(t, allowed, got[1])
			// An untouched page is not there: -ENOENT, or -EFAULT from
			// kernels that report a missing page table that way (6.1).
			require.Contains(t, []int{-int(syscall.ENOENT), -int(syscall.EFAULT)}, got[2], "an untouched page is not there")
		})
	}
}

func TestApplyRefusedNamesTheErrno(t *testing.T) {
	needMempolicy(t)
	_, p := mapRange(t, 64<<10)
	// A node this machine does not have (the kernel refuses it).
	bad := numa.System().IDs()
	missing := bad[len(bad)-1] + 63
	err := numa.Apply(p, []numa.Part{{Off: 0, Len: 64 << 10, Mode: numa.ModeBind, Nodes: []int{missing}}})
	require.ErrorIs(t, err, numa.ErrPolicy)
	require.True(t, errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EFAULT), "%v", err)
	require.ErrorContains(t, err, fmt.Sprintf("bind %d", missing))
	mode, _, err := numa.GetPolicy(p)
	require.NoError(t, err)
	require.Equal(t, numa.ModeDefault, mode, "a refused policy leaves the range as it was")
	// An unaligned start.
	err = numa.Apply(p+1, []numa.Part{{Off: 0, Len: 4096, Mode: numa.ModeLocal}})
	require.ErrorIs(t, err, syscall.EINVAL)
}

// TestInterleaveReachesTheKernel: even on one node, an interleave policy is
// what the kernel records.
func TestInterleaveReachesTheKernel(t *testing.T) {
	needMempolicy(t)
	all := numa.System().IDs()
	_, p := mapRange(t, 1*mib)
	require.NoError(t, numa.Apply(p, []numa.Part{{Len: mib, Mode: numa.ModeInterleave, Nodes: all}}))
	mode, nodes, err := numa.GetPolicy(p)
	require.NoError(t, err)
	require.Equal(t, numa.ModeInterleave, mode)
	require.Equal(t, all, nodes)
	require.Equal(t, "interleave:"+numa.FormatList(all), numaMapsPolicy(t, p))
}

func TestCurrentNode(t *testing.T) {
	n, err := numa.CurrentNode()
	require.NoError(t, err)
	require.Contains(t, numa.System().IDs(), n)
}

// TestSupportedAgreesWithTheKernel: Supported is false exactly where the
// memory-policy calls answer ENOSYS.
func TestSupportedAgreesWithTheKernel(t *testing.T) {
	_, p := mapRange(t, 4096)
	_, _, err := numa.GetPolicy(p)
	require.Equal(t, !errors.Is(err, syscall.ENOSYS), numa.Supported(), "%v", err)
}

// TestFastNodeAgreesWithGetcpu: where the CPU's register is readable, it
// names the node getcpu(2) names, on every CPU this thread may run on.
func TestFastNodeAgreesWithGetcpu(t *testing.T) {
	if _, ok := numa.FastNode(); !ok {
		t.Skip("no node readable without a system call here (no RDTSCP, not amd64, or the kernel does not set TSC_AUX)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	agree := 0
	for range 100 {
		a, _ := numa.FastNode()
		b, err := numa.CurrentNode()
		require.NoError(t, err)
		if c, _ := numa.FastNode(); a == c { // not moved in between
			require.Equal(t, b, a)
			agree++
		}
	}
	require.Positive(t, agree)
}
