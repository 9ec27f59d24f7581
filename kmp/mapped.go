package kmp

import (
	"sort"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/target"
)

// The device data environment's associations (omp_target_associate_ptr):
// per device, host ranges and the device address each corresponds to. As
// in LLVM (MappingInfoTy::associatePtr), an association has an infinite
// reference count: only omp_target_disassociate_ptr of its host start
// removes it. Unlike LLVM's release builds, a range that overlaps another
// association without starting where it does is refused (LLVM inserts it
// and lookups then find either).
var (
	assocMu sync.Mutex
	assocs  = map[*target.Device][]association{} // sorted by host
)

type association struct {
	host, end, dev uintptr
}

// findAssoc returns the index of the association holding host address p on
// d, or -1. assocMu is held.
func findAssoc(d *target.Device, p uintptr) int {
	as := assocs[d]
	i := sort.Search(len(as), func(i int) bool { return as[i].end > p })
	if i < len(as) && as[i].host <= p {
		return i
	}
	return -1
}

// mappedDevice returns the device behind a device number (already through
// devArg) for the mapping routines, which answer false or nil for a bad one
// as LLVM does (a warning besides, since there is no error to return).
func mappedDevice(fn string, device int) (*target.Device, bool) {
	if device < 0 || device > target.InitialDevice() {
		warnf("%s: device %d is not a device number (0..%d)", fn, device, target.InitialDevice())
		return nil, false
	}
	d := lookupDevice(fn, device)
	return d, d != nil
}

// assocDevice is device for TargetAssociatePtr and TargetDisassociatePtr:
// a device number (warned about when bad), never the initial device, which
// has no associations.
func assocDevice(fn string, device int) (*target.Device, bool) {
	if device == target.InitialDevice() {
		warnf("%s: no association possible on the host (device %d)", fn, device)
		return nil, false
	}
	return mappedDevice(fn, device)
}

// TargetIsPresent is omp_target_is_present: 1 when the host address ptr is
// mapped on device (an association made by TargetAssociatePtr holds it; on
// the initial device every address is present), else 0. As in LLVM, nil is
// 0 and one byte at ptr is what is looked up.
func TargetIsPresent(ptr unsafe.Pointer, device int) int {
	device, ok := devArg("omp_target_is_present", device)
	if !ok || ptr == nil {
		return 0
	}
	if device == target.InitialDevice() {
		return 1
	}
	d, ok := mappedDevice("omp_target_is_present", device)
	if !ok {
		return 0
	}
	assocMu.Lock()
	defer assocMu.Unlock()
	if findAssoc(d, uintptr(ptr)) < 0 {
		return 0
	}
	return 1
}

// GetMappedPtr is omp_get_mapped_ptr: the device address that corresponds
// to the host address ptr on device, or nil when it is not mapped there.
// On the initial device it is ptr itself; nil gives nil (with a warning,
// as LLVM reports it).
func GetMappedPtr(ptr unsafe.Pointer, device int) unsafe.Pointer {
	device, ok := devArg("omp_get_mapped_ptr", device)
	if !ok {
		return nil
	}
	if ptr == nil {
		warnf("omp_get_mapped_ptr: nil pointer")
		return nil
	}
	if device == target.InitialDevice() {
		return ptr
	}
	d, ok := mappedDevice("omp_get_mapped_ptr", device)
	if !ok {
		return nil
	}
	assocMu.Lock()
	defer assocMu.Unlock()
	i := findAssoc(d, uintptr(ptr))
	if i < 0 {
		return nil
	}
	a := assocs[d][i]
	return cmem.Ptr(a.dev + (uintptr(ptr) - a.host))
}

// TargetAssociatePtr is omp_target_associate_ptr: it maps the host range
// [hostPtr, hostPtr+size) to the device memory at devicePtr+deviceOffset
// on device, so that TargetIsPresent and GetMappedPtr find it. 0 on
// success; the same association again is 0 too; -1 (and a warning) for nil
// pointers, size 0, the initial device (no association is possible there),
// a device that cannot be used, another association at hostPtr, or one
// that the range overlaps.
func TargetAssociatePtr(hostPtr, devicePtr unsafe.Pointer, size, deviceOffset uintptr, device int) int {
	const fn = "omp_target_associate_ptr"
	device, ok := devArg(fn, device)
	if !ok {
		return -1
	}
	if hostPtr == nil || devicePtr == nil || size == 0 {
		warnf("%s: invalid arguments (host %p, device %p, size %d)", fn, hostPtr, devicePtr, size)
		return -1
	}
	d, ok := assocDevice(fn, device)
	if !ok {
		return -1
	}
	if err := d.Open(); err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	h, dev := uintptr(hostPtr), uintptr(devicePtr)+deviceOffset
	end := h + size
	if end < h {
		warnf("%s: host range %#x+%d wraps around", fn, h, size)
		return -1
	}
	assocMu.Lock()
	defer assocMu.Unlock()
	as := assocs[d]
	i := sort.Search(len(as), func(i int) bool { return as[i].host >= h })
	if i < len(as) && as[i].host == h {
		if as[i].end == end && as[i].dev == dev {
			return 0 // the same association: nothing to do, as in LLVM
		}
		warnf("%s: host %#x is already associated with device address %#x (%d bytes) on device %d; disassociate it first",
			fn, h, as[i].dev, as[i].end-as[i].host, device)
		return -1
	}
	if (i > 0 && as[i-1].end > h) || (i < len(as) && as[i].host < end) {
		o := as[i-1]
		if i == 0 || as[i-1].end <= h {
			o = as[i]
		}
		warnf("%s: host range [%#x, %#x) overlaps the association [%#x, %#x) on device %d", fn, h, end, o.host, o.end, device)
		return -1
	}
	as = append(as, association{})
	copy(as[i+1:], as[i:])
	as[i] = association{host: h, end: end, dev: dev}
	assocs[d] = as
	return 0
}

// TargetDisassociatePtr is omp_target_disassociate_ptr: it removes the
// association that starts at hostPtr on device. 0 on success; -1 (and a
// warning) for nil, the initial device, a bad device, or no association
// starting there.
func TargetDisassociatePtr(hostPtr unsafe.Pointer, device int) int {
	const fn = "omp_target_disassociate_ptr"
	device, ok := devArg(fn, device)
	if !ok {
		return -1
	}
	if hostPtr == nil {
		warnf("%s: nil host pointer", fn)
		return -1
	}
	d, ok := assocDevice(fn, device)
	if !ok {
		return -1
	}
	assocMu.Lock()
	defer assocMu.Unlock()
	as := assocs[d]
	i := findAssoc(d, uintptr(hostPtr))
	if i < 0 || as[i].host != uintptr(hostPtr) {
		warnf("%s: no association starts at host %p on device %d", fn, hostPtr, device)
		return -1
	}
	assocs[d] = append(as[:i], as[i+1:]...)
	return 0
}

// TargetIsAccessible is omp_target_is_accessible: 1 when the size bytes at
// ptr, an address in device's address space, can be accessed from device,
// else 0. Every address is accessible on the initial device. On another
// device: memory that TargetAlloc (or its host and shared variants)
// returned for it, and host memory locked or pinned for it whose device
// address is its host address (the driver maps it there: CUDA's unified
// addressing). Nil or size 0 is 0. Mappings do not count (LLVM asks the
// plugin, not the mapping table).
func TargetIsAccessible(ptr unsafe.Pointer, size uintptr, device int) int {
	device, ok := devArg("omp_target_is_accessible", device)
	if !ok || ptr == nil || size == 0 {
		return 0
	}
	if device == target.InitialDevice() {
		return 1
	}
	d, ok := mappedDevice("omp_target_is_accessible", device)
	if !ok {
		return 0
	}
	p := uintptr(ptr)
	if p+size < p {
		return 0
	}
	in := func(start, n uintptr) bool { return p >= start && p+size <= start+n }
	found := false
	targetSizes.Range(func(k, v any) bool {
		key := k.(targetKey)
		if key.d == d && in(key.p, v.(uintptr)) {
			found = true
		}
		return !found
	})
	if found {
		return 1
	}
	if e, ok := d.Registry().Entry(p); ok && e.Dev == e.Host && in(e.Host, e.Size) {
		return 1
	}
	return 0
}
