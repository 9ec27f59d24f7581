package main

import (
	"fmt"
	"time"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/loader"
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

// pinHugeSize is the region pin_huge locks: 1 GiB, or the largest --sizes.
func pinHugeSize(c *benchConfig) uintptr {
	if c.sizes != nil {
		return uintptr(maxOf(c.sizes))
	}
	return 1 << 30
}

// pinHugeSection: the cost of pinning a large region (map, mlock, munlock,
// unmap: what the host device does for a pinned chunk) with 4 KiB pages and
// with transparent huge pages asked first (MADV_HUGEPAGE), side by side.
func pinHugeSection(c *benchConfig) *benchSection {
	s := &benchSection{}
	n := pinHugeSize(c)
	for _, series := range []string{"4k", "thp"} {
		s.cases = append(s.cases, &benchCase{group: "pin_huge", series: series, size: int64(n),
			run: func(budget time.Duration) (float64, int, error) {
				lc, err := loader.C()
				if err != nil {
					return 0, 0, err
				}
				return measure(budget, func(k int) error {
					for range k {
						p, err := lc.MapAligned(n, 2<<20)
						if err != nil {
							return err
						}
						if series == "thp" {
							if err := numa.AdviseHuge(p, n); err != nil {
								_ = lc.Unmap(p, n)
								return fmt.Errorf("madvise(MADV_HUGEPAGE): %w", err)
							}
						}
						err = lc.Mlock(p, n)
						if err == nil {
							err = lc.Munlock(p, n)
						}
						if uerr := lc.Unmap(p, n); err == nil {
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
	return s
}
