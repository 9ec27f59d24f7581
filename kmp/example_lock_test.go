package kmp

import (
	"fmt"
	"unsafe"

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
