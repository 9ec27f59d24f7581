// Package hugetest gives tests 2 MiB hugetlb pages, or takes them away:
// Need reserves pages by raising the pool's nr_hugepages (root, a writable
// /sys), None empties it, and both put the old size back in t.Cleanup.
// Where that cannot be done they skip the test. Only tests import it.
package hugetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ompalloc/ompalloc/internal/numa"
)

// Pool reads the 2 MiB pool, skipping the test where there is none.
func Pool(t testing.TB) numa.HugeTLBPool {
	t.Helper()
	p, ok := numa.HugeTLBPoolNow(numa.HugeTLBPage)
	if !ok {
		t.Skip("no 2 MiB hugetlb page pool on this system (/sys/kernel/mm/hugepages/hugepages-2048kB)")
	}
	return p
}

// Need makes n 2 MiB pages available to new mappings. It writes
// nr_hugepages only when fewer are free: a pool reserved beforehand (CI)
// is left as it is. It skips where a plain MAP_HUGETLB mmap fails anyway.
func Need(t testing.TB, n uint64) numa.HugeTLBPool {
	t.Helper()
	p := Pool(t)
	if p.Available() < n {
		resize(t, p, p.Total+n-p.Available())
		p = Pool(t)
		if p.Available() < n {
			t.Skipf("the kernel found %d free 2 MiB pages of the %d asked (memory fragmented)", p.Available(), n)
		}
	}
	if err := probe(); err != nil {
		t.Skipf("a 2 MiB MAP_HUGETLB mapping fails in this process although the pool has pages (qemu-user?): %v", err)
	}
	return p
}

// None makes the pool have no page available to new mappings.
func None(t testing.TB) numa.HugeTLBPool {
	t.Helper()
	p := Pool(t)
	if p.Available() == 0 {
		return p
	}
	resize(t, p, p.Total-p.Available()) // pages in use stay (as surplus)
	p = Pool(t)
	if p.Available() != 0 {
		t.Skipf("%d 2 MiB pages stay available after shrinking the pool", p.Available())
	}
	return p
}

func resize(t testing.TB, p numa.HugeTLBPool, total uint64) {
	t.Helper()
	f := filepath.Join(p.Dir, "nr_hugepages")
	if err := os.WriteFile(f, []byte(fmt.Sprint(total)), 0); err != nil {
		t.Skipf("cannot resize the hugetlb pool (%d free of %d): %v", p.Free, p.Total, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(f, []byte(fmt.Sprint(p.Total)), 0); err != nil {
			t.Errorf("restoring %s to %d: %v", f, p.Total, err)
		}
	})
}
