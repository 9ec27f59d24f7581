// Lockmem locks a user buffer for a device, as llvm_omp_target_lock_mem
// does, and shows the registry's rules: a lock inside a locked range only
// adds a reference, each lock needs its unlock, and a range that runs past
// a locked one is refused — in every build, with nothing left behind.
//
//	go run ./examples/lockmem
//
// The kmp functions mirror C (nil on failure, one warning line on stderr);
// the same operations on a target.Device return errors for errors.Is.
package main

import (
	"errors"
	"fmt"
	"log"
	"unsafe"

	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/target"
)

func main() {
	dev := kmp.GetDefaultDevice() // the host when there is no GPU
	const size = 64 << 10
	buf := kmp.AlignedAlloc(4096, size, kmp.DefaultMemAlloc) // C memory, not the Go heap
	if buf == nil {
		log.Fatal("out of memory")
	}
	defer kmp.Free(buf, kmp.DefaultMemAlloc)

	d, err := target.Get(dev)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("device %d (%s)\n", dev, d.Plugin())

	// Lock the whole buffer, then a sub-range of it: one entry, two references.
	if kmp.TargetLockMem(buf, size, dev) == nil {
		log.Fatal("lock failed (see the warning above)")
	}
	inner := unsafe.Add(buf, 4096)
	if kmp.TargetLockMem(inner, 8192, dev) == nil {
		log.Fatal("nested lock failed")
	}
	e, _ := d.Registry().Entry(uintptr(buf))
	fmt.Printf("after two locks: %d entry, size %d, references %d\n", d.Registry().Stats().Entries, e.Size, e.Refs)

	// A range that starts inside the buffer and runs past its end is refused.
	_, err = d.LockMem(uintptr(buf)+size-4096, 8192)
	fmt.Println("partial overlap:", err)
	fmt.Println("  errors.Is(err, target.ErrOverlap):", errors.Is(err, target.ErrOverlap))
	fmt.Println("  kmp returns nil:", kmp.TargetLockMem(unsafe.Add(buf, size-4096), 8192, dev) == nil)

	// Unlock with any pointer inside the range; the last unlock unlocks.
	kmp.TargetUnlockMem(unsafe.Add(inner, 100), dev)
	kmp.TargetUnlockMem(buf, dev)
	fmt.Println("after two unlocks:", d.Registry().Stats().Entries, "entries")

	// Unlocking again is an error, and changes nothing.
	err = d.UnlockMem(uintptr(buf))
	fmt.Println("unlock of unlocked memory:", err)
	fmt.Println("  errors.Is(err, target.ErrNotLocked):", errors.Is(err, target.ErrNotLocked))

	// A device that does not exist: an error, never an abort.
	_, err = target.Get(42)
	fmt.Println("bad device:", err)
	fmt.Println("  errors.Is(err, target.ErrBadDevice):", errors.Is(err, target.ErrBadDevice))
}
