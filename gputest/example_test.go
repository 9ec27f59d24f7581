package gputest_test

import (
	"fmt"
	"log"

	"github.com/ompalloc/ompalloc/gputest"
	"github.com/ompalloc/ompalloc/target"
)

// A test binary sets the fake up once, before anything touches a device:
// here with Start, as a TestMain would (this package's TestMain did, with
// the same configuration, so Start returns that fake). A test calls
// gputest.New(t, ...) instead, which also checks for leaks and misuse at
// the test's end and skips without a C compiler.
func Example() {
	fake, err := gputest.Start(gputest.CUDA(2), gputest.HSA(1))
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range fake.Devices() {
		arr, err := target.AllocArray[float32](d, target.MemDevice, 4)
		if err != nil {
			log.Fatal(err)
		}
		if err := target.CopyToDevice(arr, []float32{1, 2, 3, 4}, nil); err != nil {
			log.Fatal(err)
		}
		got := make([]float32, 4)
		if err := target.CopyFromDevice(got, arr, nil); err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Plugin(), d.Info().Name, got, "device allocations:", fake.Counts().DeviceAllocs)
		if err := arr.Free(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("device allocations after the frees:", fake.Counts().DeviceAllocs)
	// Output:
	// cuda Fake CUDA Device 0 [1 2 3 4] device allocations: 1
	// cuda Fake CUDA Device 1 [1 2 3 4] device allocations: 1
	// amdgpu Fake AMD Instinct MI210 [1 2 3 4] device allocations: 1
	// device allocations after the frees: 0
}
