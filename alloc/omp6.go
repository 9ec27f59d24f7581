package alloc

import (
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// targetFallback applies OpenMP 6.0's default for allocators on target
// memory spaces: null_fb, not default_mem_fb (device memory that cannot be
// had must not silently become host memory). It only adds the trait when
// the list names no fallback. LLVM still defaults to default_mem_fb there.
func targetFallback(ms memspace.ID, ts []traits.Trait) []traits.Trait {
	if !isTargetMemspace(ms) {
		return ts
	}
	for _, t := range ts {
		if t.Key == traits.Fallback {
			return ts
		}
	}
	return append([]traits.Trait{{Key: traits.Fallback, Value: traits.NullFb}}, ts...)
}

// isTargetMemspace: an llvm_omp_target memory space, or a device memory
// space with a device other than the host among its resources.
func isTargetMemspace(ms memspace.ID) bool {
	if ms.IsTarget() {
		return true
	}
	d, ok := memspace.DevicesOf(ms)
	if !ok || d.Nodes != nil {
		return false
	}
	if d.Base.IsTarget() {
		return true
	}
	for _, dev := range d.Devices {
		if dev != target.InitialDevice() {
			return true
		}
	}
	return false
}
