// Pinned shows an allocator with pinned=true: page-locked memory, so that a
// device copies it without a bounce through a driver buffer. It is aligned,
// bounded by a pool, and says what happens when the memory cannot be had.
//
//	go run ./examples/pinned
//
// Pinned blocks are carved out of 4 MiB chunks that are locked once (mlock
// on the host, cuMemHostRegister or hsa_amd_memory_lock on a GPU), so on
// Linux VmLck (locked memory, from /proc/self/status) rises by whole
// chunks, not per block. When pinning is refused (RLIMIT_MEMLOCK, the
// pinned-bytes limit, a driver error), the fallback trait decides:
// default_mem_fb hands out ordinary memory, null_fb returns an error.
package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// vmLck returns the VmLck line of /proc/self/status ("n/a" off Linux).
func vmLck() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmLck:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "n/a"
}

func main() {
	fmt.Println("VmLck before:", vmLck())

	// Pinned, 4 KiB aligned, at most 4 MiB at a time; beyond that (or if
	// pinning fails) blocks come from default memory instead.
	a, err := alloc.New(memspace.Default,
		alloc.WithPinned(true),
		alloc.WithAlignment(4096),
		alloc.WithPoolSize(4<<20),
		alloc.WithFallback(traits.DefaultMemFb))
	if err != nil {
		log.Fatal(err)
	}
	var blocks []unsafe.Pointer
	for i := range 5 {
		p, err := a.Alloc(1 << 20)
		if err != nil {
			log.Fatal(err)
		}
		from := "pinned"
		if info, err := alloc.Inspect(p); err == nil && info.Allocator != a {
			from = "fallback: " + info.Allocator.String() // the pool is full
		}
		fmt.Printf("block %d: 1 MiB, 4 KiB aligned: %v, %s\n", i, uintptr(p)%4096 == 0, from)
		blocks = append(blocks, p)
	}
	st := a.Stats()
	fmt.Printf("live blocks %d, pool %d of %d bytes used, fallbacks taken %d\n",
		st.BlocksLive, st.PoolUsed, st.PoolSize, st.Fallbacks)
	fmt.Printf("pinned: %d bytes of this allocator's live blocks\n", st.PinnedBytes)
	for _, pool := range alloc.ReadPinnedStats().Pools {
		fmt.Printf("device %d's pinned pool: %d bytes locked (%d idle) in %d chunk(s) and %d huge region(s), %d lock calls\n",
			pool.Device, pool.Locked, pool.Idle, pool.Chunks, pool.Huge, pool.Locks)
	}
	fmt.Println("VmLck with the blocks:", vmLck())

	// null_fb: a failure is an error. Lower the pinned-bytes limit to what is
	// locked already, so that a block needing a new locked region is refused.
	strict, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	if err != nil {
		log.Fatal(err)
	}
	used := alloc.ReadPinnedStats().Used
	old := alloc.SetPinnedLimit(max(used, 1)) // 0 would mean "no limit"
	_, err = strict.Alloc(16 << 20)
	fmt.Println("null_fb beyond the limit:", err)
	fmt.Println("  errors.Is(err, alloc.ErrPinFailed):", errors.Is(err, alloc.ErrPinFailed))
	alloc.SetPinnedLimit(old)

	for _, p := range blocks {
		if err := a.Free(p); err != nil {
			log.Fatal(err)
		}
	}
	// Destroying the last allocator drawing on the pool unlocks its idle
	// memory (destroying one of several would not: the others reuse it).
	if err := strict.Destroy(); err != nil {
		log.Fatal(err)
	}
	if err := a.Destroy(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("VmLck after destroying the allocators:", vmLck())
	fmt.Printf("pinned heaps: %+v\n", alloc.ReadPinnedStats())
}
