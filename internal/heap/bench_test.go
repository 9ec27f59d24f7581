package heap

import (
	"testing"
)

func BenchmarkHeapAllocFree64(b *testing.B) {
	h := newTestHeap(b)
	for i := 0; i < b.N; i++ {
		p, _, _ := h.Alloc(64, 16, 0, false)
		Free(p)
	}
}

func BenchmarkHeapAllocFree64Parallel(b *testing.B) {
	h := newTestHeap(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, _, _ := h.Alloc(64, 16, 0, false)
			Free(p)
		}
	})
}

func BenchmarkHeapAllocFree1MiB(b *testing.B) {
	h := newTestHeap(b)
	for i := 0; i < b.N; i++ {
		p, _, _ := h.Alloc(1<<20, 16, 0, false)
		Free(p)
	}
}

func BenchmarkHeapMixedBatch(b *testing.B) {
	h := newTestHeap(b)
	var ps [1024]uintptr
	for i := 0; i < b.N; i += len(ps) {
		for j := range ps {
			ps[j], _, _ = h.Alloc(uintptr(64+16*(j%8)), 16, 0, false)
		}
		for _, p := range ps {
			Free(p)
		}
	}
}
