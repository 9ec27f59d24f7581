package alloc_test

import (
	"fmt"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

// What an allocator reports is its own; what the shared pinned pool of a
// device holds is the pool's.
func ExampleReadPinnedStats() {
	alloc.Trim() // start from an empty pool
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Destroy()
	idle, _ := alloc.New(memspace.Default, alloc.WithPinned(true))
	defer idle.Destroy()

	xs, err := alloc.Make[float64](a, 1000)
	if err != nil {
		fmt.Println(err) // pinning refused: RLIMIT_MEMLOCK, say
		return
	}
	fmt.Println("a:", a.Stats().PinnedBytes, "bytes pinned; idle:", idle.Stats().PinnedBytes)
	var pool alloc.PinnedPoolStats
	for _, p := range alloc.ReadPinnedStats().Pools {
		if p.Device == target.DefaultDevice() && p.Bound == nil {
			pool = p // the device's own pool
		}
	}
	fmt.Println("pool: one 4 MiB chunk locked:", pool.Chunks == 1 && pool.Locked == 4<<20, "lock calls:", pool.Locks > 0)
	alloc.FreeSlice(a, xs)
	// Output:
	// a: 8000 bytes pinned; idle: 0
	// pool: one 4 MiB chunk locked: true lock calls: true
}
