//go:build !linux

package numa

import "errors"

// HugeTLBPage is the hugetlb page size MapHugeTLB would map.
const HugeTLBPage = 2 << 20

// MapHugeTLB fails: explicit huge pages (MAP_HUGETLB) are Linux's; macOS
// has no pool of them for user mappings.
func MapHugeTLB(n, align uintptr) (uintptr, error) {
	return 0, errors.New("hugetlb pages (MAP_HUGETLB) are Linux's")
}
