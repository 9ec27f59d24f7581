package memspace

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Devices describes a memory space made at run time by the OpenMP 6.0
// routines (omp_get_devices_memspace and friends): a predefined memory
// space's kind of memory, on a list of devices, with or without the host.
type Devices struct {
	Base    ID    // the predefined memory space whose kind of memory it is
	Devices []int // device numbers, ascending, without duplicates; the host's number included when Host
	Host    bool  // the host (initial device) is one of the resources
	Nodes   []int // NUMA nodes, ascending, for a sub-memory space of a host memory space; nil = not restricted
}

func (d Devices) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%t|", d.Base, d.Host)
	for _, dev := range d.Devices {
		fmt.Fprintf(&b, "%d,", dev)
	}
	if d.Nodes != nil {
		fmt.Fprintf(&b, "|nodes %v", d.Nodes)
	}
	return b.String()
}

var (
	runtimeMu  sync.Mutex
	runtimeIDs = map[string]ID{}
	runtimeMS  []Devices // index: id - firstRuntime
)

// OnDevices returns the memory space of base's memory on the given devices.
// Identical requests (the same base, the same set of devices) give the same
// handle. base must be a predefined memory space; devices must not be
// empty; their validity is the caller's to check (package memspace does not
// know the devices).
func OnDevices(base ID, devices []int, host bool) (ID, error) {
	if !base.predefinedSpace() {
		return Null, fmt.Errorf("memory space %v is not a predefined memory space", base)
	}
	devs := slices.Clone(devices)
	slices.Sort(devs)
	devs = slices.Compact(devs)
	if len(devs) == 0 {
		return Null, fmt.Errorf("a device memory space needs at least one device")
	}
	return register(Devices{Base: base, Devices: devs, Host: host}), nil
}

// register returns the handle of d, making one for a new request.
func register(d Devices) ID {
	k := d.key()
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	if id, ok := runtimeIDs[k]; ok {
		return id
	}
	id := firstRuntime + ID(len(runtimeMS))
	runtimeMS = append(runtimeMS, d)
	runtimeIDs[k] = id
	return id
}

// DevicesOf returns what a runtime-made memory space stands for.
func DevicesOf(id ID) (Devices, bool) {
	if !id.runtimeRange() {
		return Devices{}, false
	}
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	i := id - firstRuntime
	if i >= ID(len(runtimeMS)) {
		return Devices{}, false
	}
	d := runtimeMS[i]
	d.Devices = slices.Clone(d.Devices)
	d.Nodes = slices.Clone(d.Nodes)
	return d, true
}

// Exists reports whether id is a predefined or runtime-made memory space.
func (id ID) Exists() bool {
	if id.predefinedSpace() {
		return true
	}
	_, ok := DevicesOf(id)
	return ok
}
