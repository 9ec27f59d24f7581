package numa_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/hugetest"
	"github.com/ompalloc/ompalloc/internal/numa"
)

// kernelPageKiB is the KernelPageSize of the mapping starting at p.
func kernelPageKiB(t *testing.T, p uintptr) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if lo, _, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			a, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && uintptr(a) == p
			continue
		}
		if in && f[0] == "KernelPageSize:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no mapping starts at %#x", p)
	return 0
}

func TestMapHugeTLB(t *testing.T) {
	hugetest.Need(t, 4)
	c, err := dl.C()
	require.NoError(t, err)
	for _, tc := range []struct{ n, align uintptr }{
		{2 << 20, 2 << 20}, {4 << 20, 4 << 20}, {2 << 20, 64 << 20}, {6 << 20, 4 << 20},
	} {
		before := hugetest.Pool(t)
		p, err := numa.MapHugeTLB(tc.n, tc.align)
		require.NoError(t, err, "%d bytes aligned to %d", tc.n, tc.align)
		require.Zero(t, p%tc.align, "aligned to %d", tc.align)
		if numa.Supported() { // not qemu-user, whose smaps is emulated
			require.Equal(t, 2048, kernelPageKiB(t, p))
		}
		after := hugetest.Pool(t)
		require.Equal(t, uint64(tc.n/numa.HugeTLBPage), after.Reserved-before.Reserved,
			"only the mapping's pages are reserved, not the alignment slack")
		b := cmem.Bytes(p, tc.n)
		b[0], b[tc.n-1] = 1, 2
		require.NoError(t, c.Unmap(p, tc.n))
		require.Equal(t, before.Reserved, hugetest.Pool(t).Reserved)
	}
}

func TestMapHugeTLBRefuses(t *testing.T) {
	for _, tc := range []struct {
		n, align uintptr
		want     string
	}{
		{3 << 20, 2 << 20, "not whole 2 MiB pages"},
		{2 << 20, 1 << 20, "not whole 2 MiB pages"},
		{0, 2 << 20, "not whole 2 MiB pages"},
	} {
		_, err := numa.MapHugeTLB(tc.n, tc.align)
		require.ErrorContains(t, err, tc.want)
	}
	hugetest.None(t)
	_, err := numa.MapHugeTLB(2<<20, 2<<20)
	require.ErrorIs(t, err, syscall.ENOMEM, "no free page: ENOMEM at mmap, not SIGBUS at the first touch")
	require.ErrorContains(t, err, "mmap MAP_HUGETLB")
}
