package gputest

import (
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// Counts are the fake drivers' own counters, summed over the vendors set
// up: what the driver holds now, and the misuse it caught so far.
type Counts struct {
	// DeviceAllocs counts live device-memory allocations: cuMemAlloc
	// blocks and the blocks the CUDA memory pools reserved; allocations
	// from the AMD GPU agents' pools.
	DeviceAllocs int
	// DeviceBytes is the device memory in use, as the driver counts it
	// (pool reservations included), per device in Fake.Devices order.
	DeviceBytes []uint64
	// PinnedHost counts page-locked host memory the driver holds:
	// cuMemAllocHost/cuMemHostAlloc blocks and cuMemHostRegister
	// registrations; hsa_amd_memory_lock locks.
	PinnedHost int
	// Queues counts live CUDA streams and HSA signals.
	Queues int
	// Misuse counts what the drivers caught: CUDA copies that touched
	// stream-ordered pool memory before its allocation or after its free
	// completed on the device; hsa_amd_memory_unlock calls of memory not
	// locked. Any is a bug in the code under test (or in ompalloc).
	Misuse int
}

// Counts reads the fakes' counters now.
func (f *Fake) Counts() Counts {
	p := f.p
	var c Counts
	if p.cfg.cuda > 0 {
		live := func(kind uintptr) int { return int(int32(dlcall.Call(p.cudaHook["fakecuda_live"], kind))) }
		c.DeviceAllocs += live(0) + live(5)
		c.PinnedHost += live(2) + live(3)
		c.Queues += live(4)
		c.Misuse += int(dlcall.Call(p.cudaHook["fakecuda_pool_misuse"]))
		for i := range p.cfg.cuda {
			c.DeviceBytes = append(c.DeviceBytes, uint64(dlcall.Call(p.cudaHook["fakecuda_used"], uintptr(i))))
		}
	}
	if p.cfg.hsa > 0 {
		c.DeviceAllocs += int(p.hsaCount("gpu_allocs"))
		c.PinnedHost += int(p.hsaCount("locks"))
		c.Queues += int(p.hsaCount("signals"))
		c.Misuse += int(p.hsaCount("stray_unlocks"))
		for i := range p.cfg.hsa {
			c.DeviceBytes = append(c.DeviceBytes, uint64(p.hsaCount(fmt.Sprintf("vram_used:%d", i))))
		}
	}
	return c
}

func (p *process) hsaCount(what string) int64 {
	b := append([]byte(what), 0)
	n := int64(dlcall.Call(p.hsaHook["fakehsa_count"], uintptr(unsafe.Pointer(&b[0]))))
	runtime.KeepAlive(b)
	return n
}

// Calls reports how many times the CUDA driver function name (without
// _v2: "cuMemAlloc", "cuMemcpyHtoDAsync") was called so far; -1 without a
// fake CUDA driver. The HSA fake counts calls of a few functions only
// (Counts covers what it holds).
func (f *Fake) Calls(name string) int64 {
	if f.p.cfg.cuda == 0 {
		return -1
	}
	b := append([]byte(strings.TrimSuffix(name, "_v2")), 0)
	n := int64(dlcall.Call(f.p.cudaHook["fakecuda_calls"], uintptr(unsafe.Pointer(&b[0]))))
	runtime.KeepAlive(b)
	return n
}

// tb is what check needs of a testing.TB.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
}

// check runs at the end of New's test: misuse caught during it fails the
// test, and so does device memory allocated during it and still live once
// every device's pool was trimmed (the pools give back blocks whose queued
// work the host has seen complete, so this waits up to 5 s for that).
func (f *Fake) check(t tb, allowLeaks bool) {
	t.Helper()
	now := f.Counts()
	if n := now.Misuse - f.start.Misuse; n > 0 {
		t.Errorf("gputest: the fake driver caught %d misuse(s) during the test: %s", n, f.misuseWhat())
	}
	if allowLeaks {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for now.DeviceAllocs > f.start.DeviceAllocs && time.Now().Before(deadline) {
		for _, d := range f.Devices() {
			d.TrimPool(0)
		}
		time.Sleep(time.Millisecond)
		now = f.Counts()
	}
	if n := now.DeviceAllocs - f.start.DeviceAllocs; n > 0 {
		t.Errorf("gputest: %d device allocation(s) made during the test are still live (device bytes in use %v, %v at the start): free them, or pass gputest.AllowLeaks()",
			n, now.DeviceBytes, f.start.DeviceBytes)
	}
}

func (f *Fake) misuseWhat() string {
	var s []string
	if f.p.cfg.cuda > 0 {
		s = append(s, "CUDA: copies touching stream-ordered pool memory outside its allocation (before it was allocated, or after its free completed on the device)")
	}
	if f.p.cfg.hsa > 0 {
		s = append(s, "HSA: hsa_amd_memory_unlock of memory not locked")
	}
	return strings.Join(s, "; ")
}
