// Package hooks is plumbing between this module's packages that users must
// not call: functions a lower package needs from a higher one, set by the
// higher one's init.
package hooks

// HugeTLBRange is one hugetlb mapping of a pinned heap.
type HugeTLBRange struct {
	Start, Size uintptr
	Device      int // the device its pinned pool locks for
}

// HugeTLBRanges lists the pinned heaps' hugetlb mappings in address order
// (set by alloc). The kernel does not count them in VmLck although they
// are locked and registered; internal/leakcheck leaves them out of its
// VmLck sum.
var HugeTLBRanges = func() []HugeTLBRange { return nil }
