package alloc

import (
	"testing"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// BenchmarkPartitionAllocFree: a 64-byte alloc+free on allocators with each
// partition, side by side. The policy is applied per chunk, so once the
// chunks exist they all cost what the default costs.
func BenchmarkPartitionAllocFree(b *testing.B) {
	for _, c := range []struct {
		name string
		v    traits.Value
	}{{"environment", traits.Environment}, {"nearest", traits.Nearest}, {"blocked", traits.Blocked}, {"interleaved", traits.Interleaved}} {
		b.Run(c.name, func(b *testing.B) {
			a, err := NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Partition, Value: c.v}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = a.Destroy() }()
			for b.Loop() {
				p, err := a.Alloc(64)
				if err != nil {
					b.Fatal(err)
				}
				_ = Free(p)
			}
		})
	}
}
