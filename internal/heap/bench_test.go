package heap

import (
	"runtime"
	"sync"
	"testing"
	"time"
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

// BenchmarkFreeReleasingChunkUnderLoad times a Free that lets a chunk go
// (a heap that keeps no empty chunk, each block in a chunk of its own:
// a partial source, as a pinned heap under a small limit) while
// GOMAXPROCS-1 goroutines keep the other Ps busy: a stop-the-world must
// stop them, and on a loaded machine their threads wait for a CPU. (Run it
// where other processes load the CPUs too, as the figures in RELIABILITY.md
// were taken: 2 cores, load about 15.) Issue 29, item 7: that Free
// waited for the chunk's grace period, a stop-the-world that waits for
// every P, 34-180 ms on a loaded 2-core machine; it now hands the release
// to a goroutine and returns. Metrics: the mean and the worst Free, and the
// mean time until the chunk is back with the source (WaitReleases).
func BenchmarkFreeReleasingChunkUnderLoad(b *testing.B) {
	src := &budgetSource{budget: 64 << 10}
	h := New(src, Config{Name: "bench", KeepChunks: 0})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range max(runtime.GOMAXPROCS(0)-1, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sink []byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				sink = make([]byte, 4096) // busy, and calling into the runtime
				for i := range sink {
					sink[i] = byte(i)
				}
			}
		}()
	}
	b.Cleanup(func() { close(stop); wg.Wait() })
	var total, worst, back time.Duration
	b.ResetTimer()
	for range b.N {
		p, _, err := h.Alloc(40000, 16, 0, false)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := Free(p); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		h.WaitReleases()
		back += time.Since(start)
		total += d
		worst = max(worst, d)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "free-ns/op")
	b.ReportMetric(float64(worst.Nanoseconds()), "worst-free-ns")
	b.ReportMetric(float64(back.Nanoseconds())/float64(b.N), "released-ns/op")
	if src.released == 0 {
		b.Fatal("no chunk went back: the benchmark does not time what it says")
	}
}
