package kmp

import (
	"slices"
	"sync"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

// The OpenMP 6.0 device memory spaces. A memory space made here stands for
// a predefined memory space's kind of memory on a set of devices (and
// perhaps the host); identical requests give the identical handle, and the
// allocator variants give one allocator (default traits) per memory space.

func devicesMemspace(fn string, devs []int, ms MemspaceHandle, host bool) MemspaceHandle {
	base := memspace.ID(ms)
	if !slices.Contains(memspace.All(), base) {
		warnf("%s: %#x is not a predefined memory space", fn, uintptr(ms))
		return NullMemSpace
	}
	list := make([]int, 0, len(devs)+1)
	for _, d := range devs {
		d, err := deviceNum(d) // omp_initial_device is the host
		if err == nil {
			_, err = target.Get(d)
		}
		if err != nil {
			warnf("%s: %v", fn, err)
			return NullMemSpace
		}
		list = append(list, d)
	}
	if host {
		list = append(list, target.InitialDevice())
	}
	id, err := memspace.OnDevices(base, list, host)
	if err != nil {
		warnf("%s: %v", fn, err)
		return NullMemSpace
	}
	return MemspaceHandle(id)
}

// GetDevicesMemspace is omp_get_devices_memspace.
func GetDevicesMemspace(devs []int, ms MemspaceHandle) MemspaceHandle {
	return devicesMemspace("omp_get_devices_memspace", devs, ms, false)
}

// GetDeviceMemspace is omp_get_device_memspace.
func GetDeviceMemspace(dev int, ms MemspaceHandle) MemspaceHandle {
	return devicesMemspace("omp_get_device_memspace", []int{dev}, ms, false)
}

// GetDevicesAndHostMemspace is omp_get_devices_and_host_memspace.
func GetDevicesAndHostMemspace(devs []int, ms MemspaceHandle) MemspaceHandle {
	return devicesMemspace("omp_get_devices_and_host_memspace", devs, ms, true)
}

// GetDeviceAndHostMemspace is omp_get_device_and_host_memspace.
func GetDeviceAndHostMemspace(dev int, ms MemspaceHandle) MemspaceHandle {
	return devicesMemspace("omp_get_device_and_host_memspace", []int{dev}, ms, true)
}

// GetDevicesAllMemspace is omp_get_devices_all_memspace: every device and
// the host.
func GetDevicesAllMemspace(ms MemspaceHandle) MemspaceHandle {
	devs := make([]int, GetNumDevices())
	for i := range devs {
		devs[i] = i
	}
	return devicesMemspace("omp_get_devices_all_memspace", devs, ms, true)
}

var (
	msAllocMu sync.Mutex
	msAlloc   = map[MemspaceHandle]AllocatorHandle{}
)

// allocatorFor returns the one default-traits allocator of a memory space.
func allocatorFor(fn string, ms MemspaceHandle) AllocatorHandle {
	if ms == NullMemSpace {
		return NullAllocator
	}
	msAllocMu.Lock()
	defer msAllocMu.Unlock()
	if h, ok := msAlloc[ms]; ok {
		if _, live := ompglue.Lookup(uintptr(h)); live {
			return h
		}
	}
	a, err := alloc.NewFromTraits(memspace.ID(ms), nil)
	if err != nil {
		warnf("%s: %v", fn, err)
		return NullAllocator
	}
	h := AllocatorHandle(ompglue.Handle(a))
	msAlloc[ms] = h
	return h
}

// GetDevicesAllocator is omp_get_devices_allocator.
func GetDevicesAllocator(devs []int, ms MemspaceHandle) AllocatorHandle {
	return allocatorFor("omp_get_devices_allocator", GetDevicesMemspace(devs, ms))
}

// GetDeviceAllocator is omp_get_device_allocator.
func GetDeviceAllocator(dev int, ms MemspaceHandle) AllocatorHandle {
	return allocatorFor("omp_get_device_allocator", GetDeviceMemspace(dev, ms))
}

// GetDevicesAndHostAllocator is omp_get_devices_and_host_allocator.
func GetDevicesAndHostAllocator(devs []int, ms MemspaceHandle) AllocatorHandle {
	return allocatorFor("omp_get_devices_and_host_allocator", GetDevicesAndHostMemspace(devs, ms))
}

// GetDeviceAndHostAllocator is omp_get_device_and_host_allocator.
func GetDeviceAndHostAllocator(dev int, ms MemspaceHandle) AllocatorHandle {
	return allocatorFor("omp_get_device_and_host_allocator", GetDeviceAndHostMemspace(dev, ms))
}

// GetDevicesAllAllocator is omp_get_devices_all_allocator.
func GetDevicesAllAllocator(ms MemspaceHandle) AllocatorHandle {
	return allocatorFor("omp_get_devices_all_allocator", GetDevicesAllMemspace(ms))
}

// GetMemspaceNumResources is omp_get_memspace_num_resources: for a host
// memory space the NUMA nodes whose memory backs it (see memspace.Placement),
// for a target one 1, for a device memory space the devices (the host
// included) it spans.
func GetMemspaceNumResources(ms MemspaceHandle) int {
	id := memspace.ID(ms)
	if slices.Contains(memspace.All(), id) {
		if id.IsTarget() {
			return 1
		}
		nodes, _, _ := memspace.Placement(id)
		return len(nodes)
	}
	if d, ok := memspace.DevicesOf(id); ok {
		if d.Nodes != nil {
			return len(d.Nodes)
		}
		return len(d.Devices)
	}
	warnf("omp_get_memspace_num_resources: %#x is not a memory space", uintptr(ms))
	return 0
}

// GetSubmemspace is omp_get_submemspace: the memory space of the chosen
// resources (indices into the memory space's resource list: NUMA nodes for
// host memory spaces, devices for device memory spaces). An allocator on a
// host sub-memory space binds its memory to those nodes.
func GetSubmemspace(ms MemspaceHandle, resources []int) MemspaceHandle {
	id := memspace.ID(ms)
	if id.IsTarget() {
		for _, r := range resources {
			if r != 0 {
				warnf("omp_get_submemspace: resource %d out of range [0, 1) of %v", r, id)
				return NullMemSpace
			}
		}
		return ms
	}
	if slices.Contains(memspace.All(), id) {
		nodes, _, _ := memspace.Placement(id)
		return subNodes(id, nodes, resources)
	}
	d, ok := memspace.DevicesOf(id)
	if !ok {
		warnf("omp_get_submemspace: %#x is not a memory space", uintptr(ms))
		return NullMemSpace
	}
	if d.Nodes != nil {
		return subNodes(d.Base, d.Nodes, resources)
	}
	var devs []int
	host := false
	for _, r := range resources {
		if r < 0 || r >= len(d.Devices) {
			warnf("omp_get_submemspace: resource %d out of range [0, %d)", r, len(d.Devices))
			return NullMemSpace
		}
		dev := d.Devices[r]
		if d.Host && dev == target.InitialDevice() {
			host = true
		}
		devs = append(devs, dev)
	}
	sub, err := memspace.OnDevices(d.Base, devs, host)
	if err != nil {
		warnf("omp_get_submemspace: %v", err)
		return NullMemSpace
	}
	return MemspaceHandle(sub)
}

// subNodes picks resources (indices into nodes) of host memory space base.
func subNodes(base memspace.ID, nodes, resources []int) MemspaceHandle {
	var pick []int
	for _, r := range resources {
		if r < 0 || r >= len(nodes) {
			warnf("omp_get_submemspace: resource %d out of range [0, %d) of %v", r, len(nodes), base)
			return NullMemSpace
		}
		pick = append(pick, nodes[r])
	}
	sub, err := memspace.OnNodes(base, pick)
	if err != nil {
		warnf("omp_get_submemspace: %v", err)
		return NullMemSpace
	}
	return MemspaceHandle(sub)
}
