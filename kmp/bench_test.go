package kmp

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/memsample"
)

// The benchmarks here have twins in bench/alloc/libomp_bench.c with the
// same names; bench/alloc/run.sh runs both and prints ours/libomp.

func BenchmarkAllocFree(b *testing.B) {
	align64 := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkAlignment, 64}})
	defer DestroyAllocator(align64)
	for _, bc := range []struct {
		name string
		a    AllocatorHandle
	}{{"default-64", DefaultMemAlloc}, {"align64-64", align64}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Free(Alloc(64, bc.a), bc.a)
			}
		})
	}
}

// BenchmarkAllocFreeParallel2 runs the AllocFree loops in two goroutines
// at once and reports wall time per loop iteration, so it compares directly
// with AllocFree: equal means no slowdown per operation. align64 is a
// runtime allocator: its allocations are counted in flight for Destroy, so
// it shows whether that count is shared between the goroutines.
func BenchmarkAllocFreeParallel2(b *testing.B) {
	align64 := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkAlignment, 64}})
	defer DestroyAllocator(align64)
	for _, bc := range []struct {
		name string
		a    AllocatorHandle
	}{{"default-64", DefaultMemAlloc}, {"align64-64", align64}} {
		b.Run(bc.name, func(b *testing.B) {
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						Free(Alloc(64, bc.a), bc.a)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkMixedBatch: 1024 allocations of 64..176 bytes, then 1024 frees;
// ns/op is per allocation+free.
func BenchmarkMixedBatch(b *testing.B) {
	var ps [1024]unsafe.Pointer
	for i := 0; i < b.N; i += len(ps) {
		for j := range ps {
			ps[j] = Alloc(uintptr(64+16*(j%8)), DefaultMemAlloc)
		}
		for _, p := range ps {
			Free(p, DefaultMemAlloc)
		}
	}
}

func BenchmarkPinnedAllocFree(b *testing.B) {
	pinned := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPinned, AtvTrue}})
	if pinned == NullAllocator {
		b.Skip("no pinned allocator")
	}
	defer DestroyAllocator(pinned)
	b.Run("1MiB", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p := Alloc(1<<20, pinned)
			if p == nil {
				b.Fatal("pinned allocation failed")
			}
			Free(p, pinned)
		}
	})
}

// BenchmarkAllocFreeSampled is AllocFree/default-64 with the heap profile
// (package memprof) sampling at Go's default rate, one sample per 512 KiB
// on average: its cost over AllocFree/default-64 is what profiling costs
// (README, Performance).
func BenchmarkAllocFreeSampled(b *testing.B) {
	old := memsample.Rate()
	memsample.SetRate(512 << 10)
	defer memsample.SetRate(old)
	for i := 0; i < b.N; i++ {
		Free(Alloc(64, DefaultMemAlloc), DefaultMemAlloc)
	}
}
