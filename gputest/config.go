package gputest

import (
	"fmt"
	"time"
)

// An Option configures New or Start.
type Option func(*config)

// config is what a test binary's fake is set up with. Everything but
// allowLeaks is read once, when the driver is initialised, so every New of
// a process must agree on it.
type config struct {
	cuda, hsa  int           // devices of each vendor, 0: that vendor is disabled
	memory     uint64        // bytes of device memory per device, 0: the fake's default
	delay      time.Duration // how late each asynchronous copy runs, -1: the fake's default
	noPools    bool          // CUDA devices without the stream-ordered allocator
	allowLeaks bool          // New only: no leak check at the end of the test
}

// CUDA asks for n fake NVIDIA devices (1..32), "Fake CUDA Device 0" and
// on, numbered first, as ompalloc numbers CUDA devices before AMD ones.
// Without CUDA or HSA, New sets up one CUDA device.
func CUDA(n int) Option { return func(c *config) { c.cuda = n } }

// HSA asks for n fake AMD GPU agents (1..16; "gfx90a") after the CUDA
// devices.
func HSA(n int) Option { return func(c *config) { c.hsa = n } }

// Memory sets each device's memory, in whole MiB (default 16 GiB for CUDA,
// 1 GiB of coarse-grained VRAM for HSA): allocations beyond it fail as the
// drivers' do (CUDA_ERROR_OUT_OF_MEMORY, HSA_STATUS_ERROR_OUT_OF_RESOURCES).
// The fake backs device memory with host memory as it is allocated, so a
// large figure costs nothing until used.
func Memory(bytes uint64) Option { return func(c *config) { c.memory = bytes } }

// CopyDelay sets how late the fake performs each asynchronous copy (CUDA's
// default 200 µs, HSA's 2 ms): a copy reads its source only when it runs,
// so a longer delay makes a buffer reused too early more certain to show.
// Use Hold, not a delay, when a test needs work to stay pending.
func CopyDelay(d time.Duration) Option { return func(c *config) { c.delay = d } }

// NoMemPools makes the CUDA devices older ones, without the driver's
// stream-ordered allocator (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 0):
// ompalloc's device pool then caches cuMemAlloc blocks itself.
func NoMemPools() Option { return func(c *config) { c.noPools = true } }

// AllowLeaks turns off New's end-of-test check that the device memory
// allocated during the test was freed (for a test that keeps memory for
// later ones on purpose). Misuse is still checked.
func AllowLeaks() Option { return func(c *config) { c.allowLeaks = true } }

func newConfig(opts []Option) (config, error) {
	c := config{delay: -1}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("gputest: a nil Option")
		}
		o(&c)
	}
	if c.cuda == 0 && c.hsa == 0 {
		c.cuda = 1
	}
	switch {
	case c.cuda < 0 || c.cuda > 32:
		return c, fmt.Errorf("gputest: CUDA(%d): the fake has 1 to 32 devices", c.cuda)
	case c.hsa < 0 || c.hsa > 16:
		return c, fmt.Errorf("gputest: HSA(%d): the fake has 1 to 16 GPU agents", c.hsa)
	case c.memory%(1<<20) != 0 || c.memory > 1<<50:
		return c, fmt.Errorf("gputest: Memory(%d): give whole MiB, up to 1 PiB", c.memory)
	case c.delay > time.Minute:
		return c, fmt.Errorf("gputest: CopyDelay(%v): at most a minute", c.delay)
	case c.noPools && c.cuda == 0:
		return c, fmt.Errorf("gputest: NoMemPools is a CUDA option and no CUDA device was asked for")
	}
	return c, nil
}

// same reports whether two configurations load the same driver.
func (c config) same(o config) bool {
	c.allowLeaks, o.allowLeaks = false, false
	return c == o
}

func (c config) String() string {
	s := ""
	if c.cuda > 0 {
		s += fmt.Sprintf("CUDA(%d) ", c.cuda)
	}
	if c.hsa > 0 {
		s += fmt.Sprintf("HSA(%d) ", c.hsa)
	}
	if c.memory > 0 {
		s += fmt.Sprintf("Memory(%d MiB) ", c.memory>>20)
	}
	if c.delay >= 0 {
		s += fmt.Sprintf("CopyDelay(%v) ", c.delay)
	}
	if c.noPools {
		s += "NoMemPools() "
	}
	return s[:len(s)-1]
}

// env is the environment the configuration loads the fakes with.
func (c config) env(cudaLib, hsaLib string) [][2]string {
	us := func(d time.Duration) string { return fmt.Sprint(d.Microseconds()) }
	var kv [][2]string
	if c.cuda > 0 {
		kv = append(kv, [2]string{"OMPALLOC_DISABLE_CUDA", ""}, [2]string{"OMPALLOC_CUDA_LIBRARY", cudaLib},
			[2]string{"FAKECUDA_DEVICES", fmt.Sprint(c.cuda)}, [2]string{"FAKECUDA_FAIL", ""},
			[2]string{"FAKECUDA_NO_MEMPOOLS", map[bool]string{true: "1"}[c.noPools]})
		if c.memory > 0 {
			kv = append(kv, [2]string{"FAKECUDA_MEM_MB", fmt.Sprint(c.memory >> 20)})
		}
		if c.delay >= 0 {
			kv = append(kv, [2]string{"FAKECUDA_COPY_DELAY_US", us(c.delay)})
		}
	} else {
		kv = append(kv, [2]string{"OMPALLOC_DISABLE_CUDA", "1"})
	}
	if c.hsa > 0 {
		kv = append(kv, [2]string{"OMPALLOC_DISABLE_HSA", ""}, [2]string{"OMPALLOC_HSA_LIBRARY", hsaLib},
			[2]string{"FAKEHSA_GPUS", fmt.Sprint(c.hsa)}, [2]string{"FAKEHSA_FAIL", ""})
		if c.memory > 0 {
			kv = append(kv, [2]string{"FAKEHSA_VRAM_MB", fmt.Sprint(c.memory >> 20)})
		}
		if c.delay >= 0 {
			kv = append(kv, [2]string{"FAKEHSA_COPY_DELAY_US", us(c.delay)})
		}
	} else {
		kv = append(kv, [2]string{"OMPALLOC_DISABLE_HSA", "1"})
	}
	return kv
}
