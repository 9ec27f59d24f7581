package pinreg

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// The benchmarks mirror bench/registry: N locked 4 KiB regions 8 KiB apart,
// visited in the same xorshift order as the C and C++ programs, with a Locker
// that does nothing (LLVM's host plugin locks nothing either), so only the
// registry is measured.

const (
	benchBase   = uintptr(0x7e00_0000_0000)
	benchStride = 8192
	benchRegion = 4096
)

var (
	benchMu   sync.Mutex
	benchRegs = map[int]*Registry{}
	sink      uintptr
)

func benchRegistry(b *testing.B, n int) *Registry {
	benchMu.Lock()
	defer benchMu.Unlock()
	if r := benchRegs[n]; r != nil {
		return r
	}
	r := New(nopLocker{})
	for i := 0; i < n; i++ {
		if _, err := r.Lock(benchBase+uintptr(i)*benchStride, benchRegion); err != nil {
			b.Fatal(err)
		}
	}
	benchRegs[n] = r
	return r
}

// xorshift32, as in the C programs; the index is (x * n) >> 32.
func next(x uint32) uint32 {
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	return x
}

func BenchmarkLockUnlockHit(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("regions=%d", n), func(b *testing.B) {
			r := benchRegistry(b, n)
			x := uint32(2463534242)
			b.ResetTimer()
			for range b.N {
				x = next(x)
				p := benchBase + uintptr(uint64(x)*uint64(n)>>32)*benchStride + 64
				d, err := r.Lock(p, 1024)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Unlock(p); err != nil {
					b.Fatal(err)
				}
				sink += d
			}
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		for _, g := range []int{1, 2} {
			// ns/op is wall time over all lookups of all goroutines.
			b.Run(fmt.Sprintf("regions=%d/goroutines=%d", n, g), func(b *testing.B) {
				r := benchRegistry(b, n)
				var wg sync.WaitGroup
				start := make(chan struct{})
				per := b.N / g
				for w := 0; w < g; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						x := uint32(2463534242 + w*7919)
						var acc uintptr
						<-start
						for range per {
							x = next(x)
							d, _ := r.Lookup(benchBase + uintptr(uint64(x)*uint64(n)>>32)*benchStride + 100)
							acc += d
						}
						benchMu.Lock()
						sink += acc
						benchMu.Unlock()
					}(w)
				}
				time.Sleep(time.Millisecond) // let the goroutines reach the gate
				b.ResetTimer()
				close(start)
				wg.Wait()
			})
		}
	}
}

// BenchmarkLockUnlockMiss creates and erases an entry per iteration (the
// Locker does nothing): the cost of the write path at 100,000 entries.
func BenchmarkLockUnlockMiss(b *testing.B) {
	r := benchRegistry(b, 100_000)
	x := uint32(88172645)
	b.ResetTimer()
	for range b.N {
		x = next(x)
		p := benchBase + uintptr(uint64(x)*100_000>>32)*benchStride + benchRegion + 64 // in a gap
		if _, err := r.Lock(p, 1024); err != nil {
			b.Fatal(err)
		}
		if err := r.Unlock(p); err != nil {
			b.Fatal(err)
		}
	}
}
