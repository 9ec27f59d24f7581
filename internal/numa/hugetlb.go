package numa

import (
	"fmt"
	"os"
	"path/filepath"
)

// HugeTLBPool is the system's pool of persistent huge pages of one size,
// read now (the topology's counts are from its first read).
type HugeTLBPool struct {
	Size     uint64 // bytes per page
	Total    uint64 // nr_hugepages
	Free     uint64 // free_hugepages: not faulted in by anyone
	Reserved uint64 // resv_hugepages: free, but promised to mappings already made
	// Dir is the sysfs folder; writing its nr_hugepages (root) resizes the pool.
	Dir string
}

// Available is how many pages a new mapping can still reserve.
func (p HugeTLBPool) Available() uint64 {
	if p.Reserved >= p.Free {
		return 0
	}
	return p.Free - p.Reserved
}

// HugeTLBPoolNow reads the pool of size-byte pages from
// /sys/kernel/mm/hugepages; ok false where the system has no such pool
// (no hugetlbfs, another page size, not Linux).
func HugeTLBPoolNow(size uint64) (HugeTLBPool, bool) {
	dir := filepath.Join("/sys/kernel/mm/hugepages", fmt.Sprintf("hugepages-%dkB", size>>10))
	if _, err := os.Stat(filepath.Join(dir, "nr_hugepages")); err != nil {
		return HugeTLBPool{}, false
	}
	return HugeTLBPool{
		Size: size, Dir: dir,
		Total:    readUint(filepath.Join(dir, "nr_hugepages")),
		Free:     readUint(filepath.Join(dir, "free_hugepages")),
		Reserved: readUint(filepath.Join(dir, "resv_hugepages")),
	}, true
}
