package pcpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
)

// A store-buffering litmus test (Dekker's): each side stores its flag, then
// loads the other's. With a plain store on one side, both loads can miss
// the other's store (on x86 as on arm64: a store waits in the store buffer)
// unless the other side's Barrier orders it. Both sides leave a gate
// together and wait a varying few spins, so that their accesses overlap in
// some rounds; with the Barrier call removed this fails here within a few
// thousand rounds.
func TestBarrierOrdersPlainStores(t *testing.T) {
	if !HasBarrier {
		t.Skip("no membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) here (or a race build)")
	}
	// 5000 rounds by default, 50000 in the long run (testenv.LongEnv): the
	// two sides spin for each other, so on a loaded machine a round costs a
	// scheduler time slice whenever they are not running at once.
	rounds := int64(50000)
	if testing.Short() || !testenv.LongTests() {
		rounds = 5000
	}
	storeBuffering(t, rounds)
}

// storeBuffering is the litmus test of TestBarrierOrdersPlainStores, for
// rounds rounds.
func storeBuffering(t *testing.T, rounds int64) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps to race")
	}
	var (
		x, y     [16]int64 // x[8] and y[8] on lines of their own
		gate     atomic.Int64
		ready    atomic.Int64
		r1, r2   = make([]int64, rounds+1), make([]int64, rounds+1)
		wg       sync.WaitGroup
		bothMiss int
	)
	wg.Add(1)
	go func() { // the fast side: a plain store, then a load
		defer wg.Done()
		for r := int64(1); r <= rounds; r++ {
			ready.Store(r)
			for gate.Load() != r {
			}
			for i := r * 7 % 13; i > 0; i-- {
				_ = gate.Load()
			}
			x[8] = r
			r1[r] = atomic.LoadInt64(&y[8])
		}
	}()
	for r := int64(1); r <= rounds; r++ { // the rare side: a store, Barrier, a load
		for ready.Load() != r {
		}
		gate.Store(r)
		for i := r * 5 % 11; i > 0; i-- {
			_ = ready.Load()
		}
		atomic.StoreInt64(&y[8], r)
		Barrier()
		r2[r] = atomic.LoadInt64(&x[8])
	}
	wg.Wait()
	for r := int64(1); r <= rounds; r++ {
		if r1[r] < r && r2[r] < r {
			bothMiss++
		}
	}
	if bothMiss > 0 {
		t.Fatalf("%d of %d rounds: each side missed the other's store across the barrier", bothMiss, rounds)
	}
}

func TestHasBarrierMatchesBuild(t *testing.T) {
	if RaceEnabled && HasBarrier {
		t.Fatal("a race build must not use the barrier: the detector cannot see its ordering")
	}
	if runtime.GOOS != "linux" && HasBarrier {
		t.Fatal("HasBarrier outside Linux")
	}
}

func BenchmarkBarrier(b *testing.B) {
	if !HasBarrier {
		b.Skip("no membarrier here")
	}
	for i := 0; i < b.N; i++ {
		Barrier()
	}
}
