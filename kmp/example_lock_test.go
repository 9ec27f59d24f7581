package kmp

import (
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/target"
)

// Locks nest: a second lock of a range inside a locked one only counts a
// reference, and the memory stays locked until the last unlock.
// target.IsPinned says whether memory is locked; the device's registry
// counts its entries.
func ExampleTargetUnlockMem() {
	host := GetInitialDevice()
	buf := TargetAllocDevice(8192, host)
	defer TargetFreeDevice(buf, host)
	d, _ := target.Get(host)
	reg := d.Registry()
	b := unsafe.Slice((*byte)(buf), 8192)

	TargetLockMem(buf, 8192, host)
	TargetLockMem(unsafe.Add(buf, 4096), 100, host) // inside: one more reference
	fmt.Println(target.IsPinned(b), reg.Stats().Entries)
	TargetUnlockMem(unsafe.Add(buf, 4096), host)
	fmt.Println(target.IsPinned(b))
	TargetUnlockMem(buf, host)
	fmt.Println(target.IsPinned(b), reg.Stats().Entries)
	// Output:
	// true 1
	// true
	// false 0
}

// An allocator made here is an alloc.Allocator too: its statistics.
func ExampleInitAllocator_stats() {
	h := InitAllocator(DefaultMemSpace, []AllocTrait{{Key: AtkPoolSize, Value: 1 << 20}})
	defer DestroyAllocator(h)
	p := Alloc(1000, h)
	q := Alloc(3000, h)
	a, _ := alloc.Lookup(alloc.Handle(h))
	st := a.Stats()
	fmt.Println(st.BlocksLive, st.BytesLive, st.PoolSize)
	Free(p, h)
	Free(q, h)
	fmt.Println(a.Stats().BlocksLive)
	// Output:
	// 2 4000 1048576
	// 0
}
