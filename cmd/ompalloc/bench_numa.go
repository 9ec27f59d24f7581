package main

import (
	"fmt"
	"time"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// partitionSection: 64-byte alloc+free on allocators with each partition,
// side by side. The policy is applied per chunk, so once the chunks exist
// every series should cost what environment (the default heap) costs.
func partitionSection() *benchSection {
	s := &benchSection{}
	names := []string{"environment", "nearest", "blocked", "interleaved"}
	values := []traits.Value{traits.Environment, traits.Nearest, traits.Blocked, traits.Interleaved}
	allocs := map[string]*alloc.Allocator{}
	s.setup = func() error {
		for i, n := range names {
			a, err := alloc.NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Partition, Value: values[i]}, {Key: traits.Fallback, Value: traits.NullFb}})
			if err != nil {
				return err
			}
			allocs[n] = a
		}
		return nil
	}
	s.teardown = func() {
		for _, a := range allocs {
			_ = a.Destroy()
		}
	}
	for _, n := range names {
		s.cases = append(s.cases, &benchCase{group: "partition_alloc_free", series: n, size: 64,
			run: func(budget time.Duration) (float64, int, error) {
				a := allocs[n]
				return measure(budget, func(k int) error {
					for range k {
						p, err := a.Alloc(64)
						if err != nil {
							return err
						}
						if err := alloc.Free(p); err != nil {
							return err
						}
					}
					return nil
				})
			}})
	}
	return s
}

// pinHugeSize is the region pin_huge locks: 64 MiB (1 GiB with --full:
// mlock faults in every page, up to seconds a run), or the largest --sizes.
func pinHugeSize(c *benchConfig) uintptr {
	return uintptr(maxOf(c.pick([]int64{64 << 20}, []int64{1 << 30})))
}

// pinHugeSection: the cost of pinning a large region (map, mlock, munlock,
// unmap: what the host device does for a pinned chunk) with 4 KiB pages,
// with transparent huge pages asked first (MADV_HUGEPAGE) and in explicit
// 2 MiB hugetlb pages (the region rounded up to whole pages), side by side.
// The hugetlb series runs only where the system's pool has enough free
// pages: bench never resizes the pool; skip says why it did not run.
func pinHugeSection(c *benchConfig) (s *benchSection, skip *BenchSkip) {
	s = &benchSection{}
	n := pinHugeSize(c)
	series := []string{"4k", "thp"}
	tlbN := (n + numa.HugeTLBPage - 1) &^ (numa.HugeTLBPage - 1)
	if why := hugeTLBShortage(tlbN); why != "" {
		skip = &BenchSkip{Group: "pin_huge hugetlb", Reason: why}
	} else {
		series = append(series, "hugetlb")
	}
	for _, series := range series {
		s.cases = append(s.cases, &benchCase{group: "pin_huge", series: series, size: int64(n),
			run: func(budget time.Duration) (float64, int, error) {
				lc, err := dl.C()
				if err != nil {
					return 0, 0, err
				}
				return measure(budget, func(k int) error {
					for range k {
						p, m, err := pinHugeMap(lc, series, n, tlbN)
						if err != nil {
							return err
						}
						err = lc.Mlock(p, m)
						if err == nil {
							err = lc.Munlock(p, m)
						}
						if uerr := lc.Unmap(p, m); err == nil {
							err = uerr
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
			}})
	}
	return s, skip
}

// pinHugeMap maps the region of one pin_huge series; it returns the bytes
// mapped (tlbN for hugetlb).
func pinHugeMap(lc *dl.LibC, series string, n, tlbN uintptr) (uintptr, uintptr, error) {
	if series == "hugetlb" {
		p, err := numa.MapHugeTLB(tlbN, numa.HugeTLBPage)
		return p, tlbN, err
	}
	p, err := lc.MapAligned(n, 2<<20)
	if err != nil {
		return 0, 0, err
	}
	if series == "thp" {
		if err := numa.AdviseHuge(p, n); err != nil {
			_ = lc.Unmap(p, n)
			return 0, 0, fmt.Errorf("madvise(MADV_HUGEPAGE): %w", err)
		}
	}
	return p, n, nil
}

// hugeTLBShortage says why n bytes of 2 MiB hugetlb pages cannot be had
// now, or "".
func hugeTLBShortage(n uintptr) string {
	pool, ok := numa.HugeTLBPoolNow(numa.HugeTLBPage)
	if !ok {
		return "no 2 MiB hugetlb page pool on this system"
	}
	need := uint64(n / numa.HugeTLBPage)
	if pool.Available() < need {
		return fmt.Sprintf("%d of the %d 2 MiB hugetlb pages it needs are free (pool of %d; reserve them: echo %d > %s/nr_hugepages)",
			pool.Available(), need, pool.Total, pool.Total+need-pool.Available(), pool.Dir)
	}
	return ""
}
