package alloc

import (
	"github.com/ompalloc/ompalloc/internal/device"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/hugetest"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

func TestParseHugePageMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want HugePageMode
		err  string
	}{
		{"", HugePagesTHP, ""},
		{"thp", HugePagesTHP, ""},
		{"off", HugePagesOff, ""},
		{"hugetlb", HugePagesTLB, ""},
		{"on", 0, `"on" is not a huge page mode: give off, thp or hugetlb`},
		{"HUGETLB", 0, `"HUGETLB" is not a huge page mode`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := parseHugePageMode(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, m)
			require.Equal(t, m.String(), map[string]string{"": "thp"}[tc.in]+tc.in)
		})
	}
}

func TestSetHugePagesReturnsThePreviousMode(t *testing.T) {
	orig := hugePages()
	t.Cleanup(func() { _, _ = SetHugePages(orig) })
	prev, err := SetHugePages(HugePagesTLB)
	require.NoError(t, err)
	require.Equal(t, orig, prev)
	prev, err = SetHugePages(HugePagesOff)
	require.NoError(t, err)
	require.Equal(t, HugePagesTLB, prev)
	require.Equal(t, HugePagesOff, hugePages())

	prev, err = SetHugePages(HugePageMode(7))
	require.ErrorContains(t, err, "HugePageMode(7) is not a huge page mode")
	require.Equal(t, HugePagesOff, prev, "a bad mode changes nothing")
	require.Equal(t, HugePagesOff, hugePages())
}

func TestHugePagesEnvWarnsOnABadValue(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want HugePageMode
		warn string
	}{
		{"hugetlb", HugePagesTLB, ""},
		{"off", HugePagesOff, ""},
		{"yes", HugePagesTHP, `ompalloc: warning: ` + envvar.HugePages + `="yes": "yes" is not a huge page mode: give off, thp or hugetlb; using thp`},
	} {
		t.Run(tc.v, func(t *testing.T) {
			t.Setenv(envvar.HugePages, tc.v)
			warn := captureWarnings(t)
			require.Equal(t, tc.want, hugeModeFromEnv())
			require.Equal(t, tc.warn, strings.TrimSpace(warn.String()))
		})
	}
}

// mapping is the /proc/self/smaps entry of the mapping holding an address.
type mapping struct {
	start, end     uintptr
	kernelPageKiB  int
	flags          []string // VmFlags
	numaMapsFields []string // its /proc/self/numa_maps line
}

func mappingOf(t *testing.T, p unsafe.Pointer) mapping {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/smaps is Linux's")
	}
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var m mapping
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			if found {
				break
			}
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && uintptr(a) <= uintptr(p) && uintptr(p) < uintptr(z) {
				m.start, m.end, found = uintptr(a), uintptr(z), true
			}
			continue
		}
		if !found {
			continue
		}
		switch f[0] {
		case "KernelPageSize:":
			m.kernelPageKiB, _ = strconv.Atoi(f[1])
		case "VmFlags:":
			m.flags = f[1:]
		}
	}
	require.True(t, found, "no mapping holds %p", p)
	nm, err := os.ReadFile("/proc/self/numa_maps")
	require.NoError(t, err)
	for _, l := range strings.Split(string(nm), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == strconv.FormatUint(uint64(m.start), 16) {
			m.numaMapsFields = f
		}
	}
	return m
}

func (m mapping) has(flag string) bool {
	for _, f := range m.flags {
		if f == flag {
			return true
		}
	}
	return false
}

func hugetlbKiB(t *testing.T) int {
	t.Helper()
	n, ok := procstatus.HugetlbKiB()
	if !ok {
		t.Skip("HugetlbPages is read from /proc/self/status (Linux 4.4 and later)")
	}
	return n
}

func withHugePages(t *testing.T, m HugePageMode) {
	t.Helper()
	prev, err := SetHugePages(m)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = SetHugePages(prev) })
}

// Issue 11, item 6: with hugetlb pages asked for and free, a pinned chunk
// and a huge pinned region lie in 2 MiB hugetlb pages, the region is sized
// in whole pages, and the statistics, the registry, the kernel's VmLck and
// its HugetlbPages agree on what is locked.
func TestPinnedMemoryInHugeTLBPages(t *testing.T) {
	Trim()
	needPinned(t, 16<<20)
	hugetest.Need(t, 8)
	withHugePages(t, HugePagesTLB)
	warn := captureWarnings(t)
	vmBase, hugeBase := vmLckKiB(t), hugetlbKiB(t)
	before := hugetest.Pool(t)
	stBefore := ReadPinnedStats()
	_, usedBefore := pinnedLimit()

	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	small, err := a.Alloc(100)
	require.NoError(t, err)
	big, err := a.Alloc(3 << 20) // a region of its own: 4 MiB, two huge pages
	require.NoError(t, err)
	fill(small, 100, 0xab)
	fill(big, 3<<20, 0xcd)
	require.Equal(t, byte(0xcd), cmem.Bytes(uintptr(big), 3<<20)[3<<20-1])

	for name, p := range map[string]unsafe.Pointer{"chunk": small, "region": big} {
		require.True(t, isPinned(t, p), "%s is registered as pinned", name)
		if !smapsTrusted() {
			continue
		}
		m := mappingOf(t, p)
		require.Equal(t, 2048, m.kernelPageKiB, "%s: KernelPageSize in /proc/self/smaps", name)
		require.True(t, m.has("ht"), "%s: VmFlags %v has ht (hugetlb)", name, m.flags)
		require.Contains(t, m.numaMapsFields, "huge", "%s: /proc/self/numa_maps", name)
		require.Zero(t, m.start%(4<<20), "%s: the mapping keeps the chunk alignment", name)
		require.Equal(t, uintptr(4<<20), m.end-m.start, "%s: one 4 MiB hugetlb mapping", name)
	}

	st := ReadPinnedStats()
	require.Equal(t, uintptr(8<<20), st.HugeTLB-stBefore.HugeTLB, "chunk and rounded region in hugetlb pages")
	require.Equal(t, stBefore.HugeTLBFallbacks, st.HugeTLBFallbacks)
	pool, ok := readPinnedPool(target.InitialDevice())
	require.True(t, ok)
	require.Equal(t, uintptr(8<<20), pool.Locked, "the region is counted as mapped: 4 MiB, not 3")
	require.Equal(t, uintptr(8<<20), pool.HugeTLB)
	_, used := pinnedLimit()
	require.Equal(t, uintptr(8<<20), used-usedBefore, "the limit counts the whole pages")
	require.Len(t, device.HugeTLBRanges(), 2, "the device core knows both holds are hugetlb (the leak check leaves them out of VmLck)")

	// The kernel: HugetlbPages has both mappings; VmLck does not count them
	// (Bytes - HugeTLB is what VmLck shows); the pool lost four free pages.
	require.Equal(t, 8<<10, hugetlbKiB(t)-hugeBase, "HugetlbPages in /proc/self/status")
	require.Equal(t, int((st.Bytes-st.HugeTLB)>>10), vmLckKiB(t)-vmBase, "VmLck = Bytes - HugeTLB")
	require.GreaterOrEqual(t, before.Free-hugetest.Pool(t).Free, uint64(4), "HugePages_Free dropped by the four pages faulted in")
	require.Empty(t, warn.String())

	require.NoError(t, Free(small))
	require.NoError(t, Free(big))
	require.NoError(t, a.Destroy())
	Trim()
	require.Zero(t, ReadPinnedStats().HugeTLB)
	require.Empty(t, device.HugeTLBRanges())
	require.Equal(t, hugeBase, hugetlbKiB(t), "the hugetlb pages are unmapped")
	require.Equal(t, vmBase, vmLckKiB(t))
}

// With hugetlb asked for and no free huge page, pinned memory comes in
// normal pages with THP advised: it works, each fallback is counted, and
// the process is warned once, not per chunk.
func TestHugeTLBFallsBackToNormalPagesAndWarnsOnce(t *testing.T) {
	Trim()
	needPinned(t, 16<<20)
	hugetest.None(t)
	withHugePages(t, HugePagesTLB)
	tlb.warned.Store(false)
	warn := captureWarnings(t)
	vmBase := vmLckKiB(t)
	fb := ReadPinnedStats().HugeTLBFallbacks

	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	small, err := a.Alloc(100)
	require.NoError(t, err)
	var bigs []unsafe.Pointer
	for range 2 {
		p, err := a.Alloc(3 << 20)
		require.NoError(t, err)
		fill(p, 3<<20, 0x5a)
		bigs = append(bigs, p)
	}
	fill(small, 100, 1)
	require.True(t, isPinned(t, small))

	st := ReadPinnedStats()
	require.Equal(t, int64(3), st.HugeTLBFallbacks-fb, "a chunk and two regions fell back")
	require.Zero(t, st.HugeTLB)
	if smapsTrusted() {
		m := mappingOf(t, small)
		require.Equal(t, os.Getpagesize()>>10, m.kernelPageKiB, "normal pages")
		require.False(t, m.has("ht"))
		if thpAvailable() {
			require.True(t, m.has("hg"), "MADV_HUGEPAGE advised on the fallback: VmFlags %v", m.flags)
		}
	}
	pool, _ := readPinnedPool(target.InitialDevice())
	require.Equal(t, uintptr(4<<20+2*4<<20), pool.Locked, "regions keep their 2 MiB sizing")
	require.Equal(t, int(pool.Locked>>10), vmLckKiB(t)-vmBase, "VmLck counts it all")

	w := warn.String()
	require.Equal(t, 1, strings.Count(w, "ompalloc: warning:"), "one warning, not one per chunk:\n%s", w)
	require.Contains(t, w, "hugetlb pages asked for ("+envvar.HugePages+"=hugetlb or SetHugePages)")
	require.Contains(t, w, "mmap MAP_HUGETLB")
	require.Contains(t, w, "nr_hugepages")
	require.Contains(t, w, "PinnedStats.HugeTLBFallbacks")

	require.NoError(t, Free(small))
	for _, p := range bigs {
		require.NoError(t, Free(p))
	}
	require.NoError(t, a.Destroy())
	Trim()
	require.Equal(t, vmBase, vmLckKiB(t))
}

// The default (THP advised) and off modes work as before: normal pages,
// regions sized to the heap's pages, VmLck counting all; thp marks the
// mapping MADV_HUGEPAGE, off does not.
func TestHugePagesTHPAndOff(t *testing.T) {
	for _, mode := range []HugePageMode{HugePagesTHP, HugePagesOff} {
		t.Run(mode.String(), func(t *testing.T) {
			Trim()
			needPinned(t, 8<<20)
			withHugePages(t, mode)
			vmBase := vmLckKiB(t)
			fb := ReadPinnedStats().HugeTLBFallbacks
			a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
			big, err := a.Alloc(3 << 20)
			require.NoError(t, err)
			fill(big, 3<<20, 7)
			if smapsTrusted() {
				m := mappingOf(t, big)
				require.False(t, m.has("ht"), "no hugetlb pages")
				if thpAvailable() {
					require.Equal(t, mode == HugePagesTHP, m.has("hg"), "MADV_HUGEPAGE: VmFlags %v", m.flags)
				}
			}
			pool, _ := readPinnedPool(target.InitialDevice())
			require.Equal(t, uintptr(3<<20), pool.Locked, "a 3 MiB region, not rounded")
			require.Zero(t, pool.HugeTLB)
			require.Equal(t, 3<<10, vmLckKiB(t)-vmBase)
			require.Equal(t, fb, ReadPinnedStats().HugeTLBFallbacks)
			require.NoError(t, Free(big))
			require.NoError(t, a.Destroy())
			Trim()
			require.Equal(t, vmBase, vmLckKiB(t))
		})
	}
}

// smapsTrusted: /proc/self/smaps shows this process's own mappings (Linux,
// not qemu-user, whose emulation shows none of the flags; memory-policy
// calls are the tell, as in needMempolicy).
func smapsTrusted() bool { return runtime.GOOS == "linux" && numa.Supported() }

// thpAvailable reports whether the kernel has transparent huge pages on,
// so that MADV_HUGEPAGE sets the hg flag (as TestPinnedChunksAskForHugePages).
func thpAvailable() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !strings.Contains(string(b), "[never]")
}
