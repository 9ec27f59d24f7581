package inflight_test

import (
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/inflight"
)

// A table of locked ranges: the driver call runs without the table's mutex,
// and a locker of an overlapping range waits for it first.
func Example() {
	var (
		mu      sync.Mutex
		flights inflight.Table
		locked  = map[uintptr]uintptr{} // the owner's books, under mu
	)
	lock := func(p, n uintptr) {
		mu.Lock()
		defer mu.Unlock()
		flights.Settle(&mu, p, p+n) // wait for calls over the same pages
		flights.Outside(&mu, p, p+n, func() {
			// mlock, cuMemHostRegister, hsa_amd_memory_lock: mu is free.
		})
		locked[p] = n
	}
	lock(0x10000, 0x1000)
	lock(0x10800, 0x100) // same page: would have waited for the first
	mu.Lock()
	fmt.Println(len(locked), flights.Len())
	mu.Unlock()
	// Output: 2 0
}
