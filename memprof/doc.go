// Package memprof shows ompalloc's off-heap memory in go tool pprof.
//
// Memory from ompalloc is outside the Go heap, so runtime/pprof's heap
// profile never sees it. Turn sampling on, and this package writes the
// sampled live blocks as a pprof heap profile of their own, with the same
// four sample types as Go's (alloc_objects, alloc_space, inuse_objects,
// inuse_space) and each sample labelled by allocator, memory space and
// pinned-ness:
//
//	memprof.SetRate(512 << 10) // one sample per 512 KiB on average, as Go's heap profile
//	http.Handle("/debug/pprof/ompalloc", memprof.Handler())
//
//	go tool pprof http://localhost:6060/debug/pprof/ompalloc
//	(pprof) top -tagfocus=pinned=true
//
// Sampling works as Go's heap profiler does: one allocation per rate bytes
// on average, the distance to the next sample drawn from an exponential
// distribution and counted down per P, the stack recorded with
// runtime.Callers, and the figures scaled up by the chance each sampled
// block had of being sampled. Off (rate 0, the default) the allocation path
// reads one flag and the free path one counter; on at 512 KiB a 64 B
// allocation adds a countdown in its P's slot, kept in the pinned section
// that takes the block (see the README for the measured cost). Rate 1
// samples every allocation; SetRate returns the rate it replaced.
//
// Importing the package also publishes the pinned pools' figures as the
// expvar variable "ompalloc" (locked, idle, chunks, lock calls, far
// allocations and failures, per device and per NUMA node; the process-wide
// pinned bytes and limit) and, under "device_memory", each opened
// accelerator's target.MemoryStats (allocated and reserved bytes and their
// peaks, counts, the pool's figures, the driver's free and total), served
// by expvar's /debug/vars. Device memory (target's Device.Alloc and device
// pool) is sampled into the heap profile too, labelled memspace "device N"
// and allocator "device pool" or "device direct".
package memprof
