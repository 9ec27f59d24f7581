package alloc_test

import (
	"errors"
	"fmt"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// arrowAllocator is Apache Arrow Go's memory.Allocator, declared here with the
// same method set: alloc.ArrowAllocator satisfies it, so it plugs into Arrow
// (array.NewFloat64Builder(alloc.NewArrowAllocator(a)), ipc.WithAllocator, ...)
// without this module importing Arrow.
type arrowAllocator interface {
	Allocate(size int) []byte
	Reallocate(size int, b []byte) []byte
	Free(b []byte)
}

func ExampleNewArrowAllocator() {
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.DefaultMemFb))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Destroy()

	var mem arrowAllocator = alloc.NewArrowAllocator(a)
	buf := mem.Allocate(100) // zeroed, 64-byte aligned, len == cap == 100
	buf[0] = 1
	buf = mem.Reallocate(50, buf) // shrinks where it lies
	buf = mem.Reallocate(4096, buf)
	fmt.Println(len(buf), buf[0], buf[4095], a.Stats().BytesLive)
	mem.Free(buf[:0]) // any length, as long as it starts where it did
	fmt.Println(a.Stats().BlocksLive)
	// Output:
	// 4096 1 0 4096
	// 0
}

// Failures panic (Arrow's interface has no error results) with an error
// that errors.Is matches.
func ExampleNewArrowAllocator_failure() {
	a, _ := alloc.New(memspace.Default, alloc.WithPoolSize(1<<20), alloc.WithFallback(traits.NullFb))
	defer a.Destroy()
	defer func() {
		err, _ := recover().(error)
		fmt.Println(errors.Is(err, alloc.ErrPoolExhausted))
	}()
	alloc.NewArrowAllocator(a).Allocate(2 << 20)
	// Output:
	// true
}

// FreeSlice frees the slice Make returned, and refuses, changing nothing,
// a slice that was re-sliced from further in or grown by append.
func ExampleFreeSlice() {
	a := alloc.Default()
	xs, _ := alloc.Make[float64](a, 8)
	err := alloc.FreeSlice(a, xs[2:])
	fmt.Println(errors.Is(err, alloc.ErrInvalidPointer))
	ys := append(xs, 1) // a copy on the Go heap
	err = alloc.FreeSlice(a, ys)
	fmt.Println(errors.Is(err, alloc.ErrInvalidPointer))
	fmt.Println(alloc.FreeSlice(a, xs[:3])) // shorter, same start: the block
	// Output:
	// true
	// true
	// <nil>
}

// Resize grows a slice from Make, in place when its block has room.
func ExampleResize() {
	a := alloc.Default()
	xs, _ := alloc.Make[int32](a, 3)
	copy(xs, []int32{1, 2, 3})
	xs, err := alloc.Resize(a, xs, 6)
	fmt.Println(xs, err)
	xs, err = alloc.Resize(a, xs, 100000) // moves: a block of 400 kB
	fmt.Println(len(xs), xs[:4], err)
	fmt.Println(alloc.FreeSlice(a, xs))
	// Output:
	// [1 2 3 0 0 0] <nil>
	// 100000 [1 2 3 0] <nil>
	// <nil>
}

// InspectSlice says who owns a slice's memory and how big it is
// (target.IsPinned says whether it is pinned).
func ExampleInspectSlice() {
	a, _ := alloc.New(memspace.Default, alloc.WithPoolSize(1<<20), alloc.WithFallback(traits.DefaultMemFb))
	defer a.Destroy()
	small, _ := alloc.Make[byte](a, 1000)
	big, _ := alloc.Make[byte](a, 2<<20) // beyond the pool: the fallback serves it
	for _, s := range [][]byte{small, big} {
		info, _ := alloc.InspectSlice(s)
		fmt.Println(info.Allocator == a, info.Size, target.IsPinned(s))
		alloc.FreeSlice(a, s)
	}
	// Output:
	// true 1000 false
	// false 2097152 false
}
