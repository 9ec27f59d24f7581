package cuda_test

import (
	"errors"
	"fmt"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/plugin/cuda"
	"github.com/ompalloc/ompalloc/loader"
)

// A machine without the driver, or without a GPU, is an ordinary case:
// Init says why and the plugin has no devices.
func Example() {
	p := cuda.New()
	if err := p.Init(); err != nil {
		st := p.Status()
		switch {
		case errors.Is(err, loader.ErrNotFound), errors.Is(err, loader.ErrDisabled):
			fmt.Println("no CUDA driver:", st.Init)
		case errors.Is(err, cuda.ErrNoDevice):
			fmt.Println("CUDA driver", st.Version, "without devices")
		default:
			fmt.Println("CUDA unusable:", err)
		}
		return
	}
	for _, d := range p.Devices() {
		info := d.Info()
		fmt.Printf("%s (sm %s, %d GiB)\n", info.Name, info.Capability, info.Memory>>30)
		buf, err := d.Alloc(plugin.MemHost, 1<<20) // pinned host memory
		if err != nil {
			fmt.Println(err)
			continue
		}
		_ = d.Free(plugin.MemHost, buf)
	}
}

// Driver failures are *cuda.Error values naming the call and the code.
func ExampleError() {
	err := fmt.Errorf("lock: %w", &cuda.Error{Call: "cuMemHostRegister", Code: 712, Name: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"})
	var e *cuda.Error
	fmt.Println(errors.As(err, &e), e.Code, errors.Is(err, cuda.ErrAlreadyRegistered))
	fmt.Println(err)
	// Output:
	// true 712 true
	// lock: cuMemHostRegister: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)
}
