package leakcheck

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/hugetest"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// The invariant holds with pinned blocks, user locks (also two sharing a
// page) and registered host memory live, and sees a page locked behind the
// registries' back.
func TestConsistentSeesVmLckDisagree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmLck is Linux's")
	}
	alloc.Trim()
	base := Start()
	require.NoError(t, base.Consistent())

	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	p, err := a.Alloc(100)
	require.NoError(t, err)
	big, err := a.Alloc(3 << 20)
	require.NoError(t, err)
	require.NoError(t, base.Consistent(), "pinned chunk and huge region")

	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	c, err := dl.C()
	require.NoError(t, err)
	buf, err := c.Map(4 * 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Unmap(buf, 4*4096)) }()
	_, err = host.LockMem(buf+100, 200)
	require.NoError(t, err)
	_, err = host.LockMem(buf+400, 5000) // shares page 0 with the first
	require.NoError(t, err)
	hp, err := host.Alloc(plugin.MemHost, 10000) // registered, mlocked
	require.NoError(t, err)
	require.NoError(t, base.Consistent(), "user locks and host-pinned memory")

	require.NoError(t, c.Mlock(buf+3*4096, 4096)) // behind the runtime's back
	err = base.Consistent()
	require.ErrorContains(t, err, "VmLck is")
	require.NoError(t, c.Munlock(buf+3*4096, 4096))
	require.NoError(t, base.Consistent())

	require.NoError(t, host.Free(plugin.MemHost, hp))
	require.NoError(t, host.UnlockMem(buf+100))
	require.NoError(t, host.UnlockMem(buf+400))
	require.NoError(t, alloc.Free(p))
	require.NoError(t, alloc.Free(big))
	require.NoError(t, a.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	require.NoError(t, base.Check())
}

// With pinned memory in hugetlb pages the invariant still holds: VmLck
// leaves those pages out and HugetlbPages has them. A hugetlb mapping made
// behind the runtime's back is seen.
func TestConsistentWithHugeTLBPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmLck and HugetlbPages are Linux's")
	}
	alloc.Trim()
	hugetest.Need(t, 5)
	prev, err := alloc.SetHugePages(alloc.HugePagesTLB)
	require.NoError(t, err)
	defer func() { _, _ = alloc.SetHugePages(prev) }()
	base := Start()
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(target.InitialDevice()), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	p, err := a.Alloc(100)
	require.NoError(t, err)
	big, err := a.Alloc(3 << 20)
	require.NoError(t, err)
	require.Equal(t, uintptr(8<<20), alloc.ReadPinnedStats().HugeTLB, "both in hugetlb pages")
	require.NoError(t, base.Consistent(), "pinned chunk and huge region in hugetlb pages")

	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	_, err = host.LockMem(uintptr(big)+100, 200) // a user's lock inside the hugetlb region
	require.NoError(t, err)
	require.NoError(t, base.Consistent(), "a user lock in hugetlb pages")
	require.NoError(t, host.UnlockMem(uintptr(big)+100))

	q, err := numa.MapHugeTLB(numa.HugeTLBPage, numa.HugeTLBPage) // behind the runtime's back
	require.NoError(t, err)
	cmem.Bytes(q, 1)[0] = 1 // fault the page in
	require.ErrorContains(t, base.Consistent(), "HugetlbPages is")
	c, err := dl.C()
	require.NoError(t, err)
	require.NoError(t, c.Unmap(q, numa.HugeTLBPage))
	require.NoError(t, base.Consistent())

	require.NoError(t, alloc.Free(p))
	require.NoError(t, alloc.Free(big))
	require.NoError(t, a.Destroy())
	alloc.Trim()
	require.NoError(t, base.Consistent())
	require.NoError(t, base.Check())
}
