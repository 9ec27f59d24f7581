package amdgpu_test

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/plugin/amdgpu"
)

// Listing the AMD GPUs, or why there are none: on a machine without
// /dev/kfd, Status().Init is "HSA_STATUS_ERROR_OUT_OF_RESOURCES".
func Example() {
	p := amdgpu.New()
	if err := p.Init(); err != nil {
		st := p.Status()
		fmt.Printf("no AMD GPU (%s): %s\n", st.Library, st.Init)
		return
	}
	for i, d := range p.Devices() {
		info := d.Info()
		fmt.Printf("%d: %s (%s), %d MiB\n", i, info.Name, info.Capability, info.Memory>>20)
	}
}

// Copying to a GPU and back on a queue; the host buffer must not be Go
// memory (here it comes from the device's own host pool).
func Example_copy() {
	p := amdgpu.New()
	if p.Init() != nil || len(p.Devices()) == 0 {
		return
	}
	d := p.Devices()[0]
	host, _ := d.Alloc(plugin.MemHost, 1<<20)
	defer d.Free(plugin.MemHost, host)
	dev, _ := d.Alloc(plugin.MemDevice, 1<<20)
	defer d.Free(plugin.MemDevice, dev)
	q, _ := d.NewQueue()
	defer q.Destroy()
	_ = d.Copy(dev, host, 1<<20, plugin.HostToDevice, q)
	_ = d.Copy(host, dev, 1<<20, plugin.DeviceToHost, q)
	if err := q.Synchronize(); err != nil {
		fmt.Println(err)
	}
}
