package kmp_test

import (
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/kmp"
)

// As in C: an allocator from a trait list, blocks, and nil where C gets
// NULL.
func ExampleInitAllocator() {
	a := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{
		{Key: kmp.AtkAlignment, Value: 64},
		{Key: kmp.AtkPoolSize, Value: 1 << 20},
		{Key: kmp.AtkFallback, Value: kmp.AtvNullFb},
	})
	defer kmp.DestroyAllocator(a)

	p := kmp.Alloc(1000, a)
	fmt.Println(p != nil, uintptr(p)%64)
	fmt.Println(kmp.Alloc(2<<20, a) == nil) // over the pool, null_fb: NULL
	kmp.Free(p, a)

	z := kmp.Calloc(10, 4, a)
	fmt.Println(unsafe.Slice((*int32)(z), 10)[9])
	kmp.Free(z, kmp.NullAllocator) // the handle passed to free does not matter
	// Output:
	// true 0
	// true
	// 0
}

// Invalid traits give omp_null_allocator and one warning line on stderr
// naming the trait; nothing aborts.
func ExampleInitAllocator_invalid() {
	a := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{{Key: kmp.AtkAlignment, Value: 3}})
	fmt.Println(a == kmp.NullAllocator)
	// Output: true
}

// omp_realloc keeps the contents up to the smaller size and may move the
// block to another allocator.
func ExampleRealloc() {
	p := kmp.Alloc(4, kmp.DefaultMemAlloc)
	copy(unsafe.Slice((*byte)(p), 4), "abcd")
	q := kmp.Realloc(p, 1<<16, kmp.LargeCapMemAlloc, kmp.DefaultMemAlloc)
	fmt.Println(string(unsafe.Slice((*byte)(q), 4)))
	fmt.Println(kmp.Realloc(q, 0, kmp.NullAllocator, kmp.NullAllocator) == nil) // size 0 frees
	// Output:
	// abcd
	// true
}
