package target_test

import (
	"fmt"
	"log"

	"github.com/ompalloc/ompalloc/target"
)

// A round trip of a typed slice through the default device: a GPU where
// there is one, else the host. No unsafe in the program.
func Example() {
	d, err := target.Get(target.DefaultDevice())
	if err != nil {
		log.Fatal(err)
	}
	xs := []float32{1, 2, 3, 4}
	buf, err := target.AllocArray[float32](d, target.MemDevice, len(xs))
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()
	if err := target.CopyToDevice(buf, xs, nil); err != nil { // nil queue: done on return
		log.Fatal(err)
	}
	back := make([]float32, len(xs))
	if err := target.CopyFromDevice(back, buf, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println(back)
	// Output: [1 2 3 4]
}

// Pin page-locks a slice the program already has, through the same
// reference-counted registry as llvm_omp_target_lock_mem, until Unpin;
// copies from it then take the one-step pinned path. (Not run as a test:
// where RLIMIT_MEMLOCK leaves nothing to lock, Pin says so instead.)
func ExamplePin() {
	xs := make([]float32, 1<<16)
	h, err := target.Pin(xs, target.DefaultDevice())
	if err != nil {
		fmt.Println("not pinned:", err) // RLIMIT_MEMLOCK, say
		return
	}
	fmt.Println(target.IsPinned(xs))
	if err := h.Unpin(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(target.IsPinned(xs)) // true, then false
}
