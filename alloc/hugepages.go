package alloc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// HugePageMode says which pages pinned chunks and huge pinned regions get.
type HugePageMode int32

const (
	// HugePagesTHP (the default) advises transparent huge pages
	// (madvise(MADV_HUGEPAGE)) on each chunk and region before locking it.
	HugePagesTHP HugePageMode = iota
	// HugePagesOff maps plain pages and advises nothing.
	HugePagesOff
	// HugePagesTLB maps explicit 2 MiB hugetlb pages (MAP_HUGETLB) from the
	// system's persistent pool (/proc/sys/vm/nr_hugepages); where the pool
	// has too few free pages, or the system has none, the chunk falls back
	// to HugePagesTHP, counted in PinnedStats.HugeTLBFallbacks, with one
	// warning per process.
	HugePagesTLB
)

func (m HugePageMode) String() string {
	switch m {
	case HugePagesTHP:
		return "thp"
	case HugePagesOff:
		return "off"
	case HugePagesTLB:
		return "hugetlb"
	}
	return fmt.Sprintf("HugePageMode(%d)", int32(m))
}

// parseHugePageMode reads a mode as OMPALLOC_HUGEPAGES takes it: off, thp
// or hugetlb ("" is thp).
func parseHugePageMode(s string) (HugePageMode, error) {
	switch s {
	case "", "thp":
		return HugePagesTHP, nil
	case "off":
		return HugePagesOff, nil
	case "hugetlb":
		return HugePagesTLB, nil
	}
	return 0, fmt.Errorf("%q is not a huge page mode: give off, thp or hugetlb", s)
}

// hugeTLBPage is the hugetlb page size used: 2 MiB, a divisor of the
// 4 MiB chunk.
const hugeTLBPage = numa.HugeTLBPage

var (
	hugeModeOnce sync.Once
	hugeModeVal  atomic.Int32
)

func initHugeMode() { hugeModeOnce.Do(func() { hugeModeVal.Store(int32(hugeModeFromEnv())) }) }

// hugeModeFromEnv reads OMPALLOC_HUGEPAGES; a bad value warns and reads as thp.
func hugeModeFromEnv() HugePageMode {
	v, _ := envvar.Lookup(envvar.HugePages) // blank: unset, thp
	m, err := parseHugePageMode(v)
	if err != nil {
		warn.Emit(warn.Env, "alloc", fmt.Sprintf("%s=%q: %v; using thp", envvar.HugePages, v, err), err)
		return HugePagesTHP
	}
	return m
}

// hugePages returns the huge page mode pinned chunks are mapped with
// (OMPALLOC_HUGEPAGES, or the last SetHugePages; ReadPinnedStats reports it).
func hugePages() HugePageMode {
	initHugeMode()
	return HugePageMode(hugeModeVal.Load())
}

// SetHugePages sets the huge page mode for pinned chunks and regions mapped
// from now on and returns the previous one; memory already mapped keeps its
// pages. An unknown mode is an error and changes nothing.
func SetHugePages(m HugePageMode) (HugePageMode, error) {
	if m < HugePagesTHP || m > HugePagesTLB {
		return hugePages(), fmt.Errorf("alloc: SetHugePages: %v is not a huge page mode (HugePagesTHP, HugePagesOff, HugePagesTLB)", m)
	}
	initHugeMode()
	return HugePageMode(hugeModeVal.Swap(int32(m))), nil
}

// The hugetlb mappings the pinned heaps hold: start → size and source.
// Registered under tlb.mu, and dropped under it together with the munmap,
// so a new mapping at the same address is never mistaken for a gone one.
var tlb struct {
	mu        sync.Mutex
	maps      map[uintptr]tlbMap
	bytes     uintptr
	fallbacks atomic.Int64
	warned    atomic.Bool
}

type tlbMap struct {
	size uintptr
	src  *pinSource
}

// RegionSize sizes huge regions in whole 2 MiB pages while hugetlb pages
// are asked for (heap.RegionSizer): munmap of hugetlb memory must end on a
// huge page boundary, and the heap then counts what is really locked.
func (s *pinSource) RegionSize(n uintptr) uintptr {
	if n%hugeTLBPage == 0 {
		return n // whole huge pages already: no mode to read (a huge pinned block's allocation asks)
	}
	if hugePages() == HugePagesTLB {
		return (n + hugeTLBPage - 1) &^ (hugeTLBPage - 1)
	}
	return n
}

// mapPages maps a pinned chunk or region of n bytes aligned to align, the
// first lockN of them to be locked: in hugetlb pages when asked for and
// had, else in normal pages (adviseHuge then asks for THP).
func (s *pinSource) mapPages(c *dl.LibC, n, align, lockN uintptr) (uintptr, error) {
	// A chunk locked only in part (under the pinned-bytes limit) stays on
	// normal pages: hugetlb would pin 2 MiB units the limit does not allow.
	// So does a region sized before a switch to hugetlb (not 2 MiB whole).
	if hugePages() != HugePagesTLB || lockN != n || n%hugeTLBPage != 0 {
		return c.MapAligned(n, align)
	}
	p, err := numa.MapHugeTLB(n, max(align, hugeTLBPage))
	if err != nil {
		s.hugeTLBFellBack(n, err)
		return c.MapAligned(n, align)
	}
	tlb.mu.Lock()
	if tlb.maps == nil {
		tlb.maps = map[uintptr]tlbMap{}
	}
	tlb.maps[p] = tlbMap{size: n, src: s}
	tlb.bytes += n
	tlb.mu.Unlock()
	return p, nil
}

// hugeTLBFellBack counts a chunk that could not have hugetlb pages, and
// warns the first time in the process.
func (s *pinSource) hugeTLBFellBack(n uintptr, err error) {
	tlb.fallbacks.Add(1)
	if !tlb.warned.CompareAndSwap(false, true) {
		return
	}
	why := "the system has no 2 MiB hugetlb pages"
	if pool, ok := numa.HugeTLBPoolNow(hugeTLBPage); ok {
		why = fmt.Sprintf("2 MiB hugetlb pages: %d of %d free, %d of them reserved; raise %s/nr_hugepages or /proc/sys/vm/nr_hugepages",
			pool.Free, pool.Total, pool.Reserved, pool.Dir)
	}
	warn.Emit(warn.HugeTLB, "alloc", fmt.Sprintf("alloc: hugetlb pages asked for (%s=hugetlb or SetHugePages), but %s could not map %d bytes in them (%v; %s); this chunk and later ones that cannot have them use normal pages with transparent huge pages advised (PinnedStats.HugeTLBFallbacks counts them)",
		envvar.HugePages, s.name, n, err, why), err)
}

// unmapPages unmaps what mapPages mapped.
func unmapPages(c *dl.LibC, p, n uintptr) error {
	tlb.mu.Lock()
	m, ok := tlb.maps[p]
	if !ok {
		tlb.mu.Unlock()
		return c.Unmap(p, n)
	}
	defer tlb.mu.Unlock()
	if m.size != n {
		// Never unmap part of a hugetlb mapping: the heap's size is wrong.
		return fmt.Errorf("alloc: unmap of %d bytes at %#x: the hugetlb mapping there has %d", n, p, m.size)
	}
	if err := c.Unmap(p, n); err != nil {
		return err
	}
	delete(tlb.maps, p)
	tlb.bytes -= n
	return nil
}

// isHugeTLB reports whether a pinned chunk or region starting at p is in
// hugetlb pages.
func isHugeTLB(p uintptr) bool {
	tlb.mu.Lock()
	defer tlb.mu.Unlock()
	_, ok := tlb.maps[p]
	return ok
}

// hugeTLBBytes returns the bytes of src's hugetlb mappings (nil: all).
func hugeTLBBytes(src *pinSource) uintptr {
	tlb.mu.Lock()
	defer tlb.mu.Unlock()
	if src == nil {
		return tlb.bytes
	}
	var n uintptr
	for _, m := range tlb.maps {
		if m.src == src {
			n += m.size
		}
	}
	return n
}
