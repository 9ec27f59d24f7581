package alloc_test

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// An allocator with traits, a typed slice in its memory (not the Go heap),
// and the slice freed.
func ExampleNew() {
	a, err := alloc.New(memspace.Default, alloc.WithAlignment(64))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Destroy()

	xs, err := alloc.Make[float32](a, 1024) // zeroed; len == cap
	if err != nil {
		fmt.Println(err)
		return
	}
	xs[0] = 1.5
	fmt.Println(len(xs), cap(xs), uintptr(unsafe.Pointer(&xs[0]))%64, xs[0]+xs[1])
	fmt.Println(alloc.FreeSlice(a, xs))
	// Output:
	// 1024 1024 0 1.5
	// <nil>
}

// Bad traits are errors that name the trait.
func ExampleNew_invalidTrait() {
	_, err := alloc.New(memspace.Default, alloc.WithAlignment(3))
	fmt.Println(errors.Is(err, alloc.ErrInvalidTrait))
	fmt.Println(err)
	// Output:
	// true
	// invalid allocator trait omp_atk_alignment=3: alignment must be a power of two
}

// Pinned memory for fast device transfers. If it cannot be pinned
// (RLIMIT_MEMLOCK, say), default_mem_fb still hands out ordinary memory.
func ExampleWithPinned() {
	a, err := alloc.New(memspace.Default,
		alloc.WithPinned(true), alloc.WithAlignment(4096), alloc.WithFallback(traits.DefaultMemFb))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Destroy()
	buf, err := alloc.Make[byte](a, 1<<20)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer alloc.FreeSlice(a, buf)
	st := a.Stats()
	fmt.Printf("pinned: %d bytes; fallbacks: %d\n", st.PinnedBytes, st.Fallbacks)
	// Output:
	// pinned: 1048576 bytes; fallbacks: 0
}

// The pool_size trait is a quota; what does not fit goes to the fallback.
func ExampleWithFallback() {
	strict, _ := alloc.New(memspace.Default, alloc.WithPoolSize(1<<20), alloc.WithFallback(traits.NullFb))
	defer strict.Destroy()
	_, err := strict.Alloc(2 << 20)
	fmt.Println(errors.Is(err, alloc.ErrPoolExhausted))

	lenient, _ := alloc.New(memspace.Default, alloc.WithPoolSize(1<<20), alloc.WithFallback(traits.DefaultMemFb))
	defer lenient.Destroy()
	p, err := lenient.Alloc(2 << 20)
	info, _ := alloc.Inspect(p)
	fmt.Println(err, info.Allocator, lenient.Stats().Fallbacks)
	alloc.Free(p)
	// Output:
	// true
	// <nil> omp_default_mem_alloc 1
}

func ExampleAllocator_Stats() {
	a, _ := alloc.New(memspace.Default, alloc.WithPoolSize(1<<20))
	defer a.Destroy()
	p, _ := a.Alloc(1000)
	q, _ := a.Alloc(3000)
	st := a.Stats()
	fmt.Println(st.BlocksLive, st.BytesLive, st.PoolSize, st.PoolUsed >= 4000)
	a.Free(p)
	a.Free(q)
	st = a.Stats()
	fmt.Println(st.BlocksLive, st.BytesLive, st.Allocs, st.Frees, st.PoolUsed)
	// Output:
	// 2 4000 1048576 true
	// 0 0 2 2 0
}
