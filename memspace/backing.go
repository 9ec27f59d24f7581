package memspace

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/numa"
)

// Backing describes what serves a memory space on this host.
type Backing struct {
	ID     ID
	Memory string // what backs it, in words
	// Kind says where the memory lives: "host" (ordinary host memory from
	// the C heap), "target-host" (page-locked host memory from a device
	// driver), "target-shared" (shared between host and device, managed),
	// "target-device" (on a device, not addressable by the host), or
	// "unknown".
	Kind     string
	BackedBy ID     // the memory space whose memory is really used: Default for the substitutes, ID otherwise
	Nodes    []int  // NUMA nodes whose memory backs a host memory space
	NodesWhy string // why those nodes
}

// Describe says what backs id, and on which NUMA nodes. The host memory spaces other than default are
// served by default host memory (see the package documentation); an unknown
// or runtime-made handle gets Kind "unknown".
func Describe(id ID) Backing { return describe(id, topology()) }

func describe(id ID, top *numa.Topology) Backing {
	b := Backing{ID: id, Kind: "host", BackedBy: id}
	var restricted bool
	b.Nodes, restricted, b.NodesWhy = placement(id, top)
	switch id {
	case Default:
		b.Memory = "host memory from the C heap (libc chunks sub-allocated by the runtime)"
	case LargeCap:
		b.Memory = "default host memory (no large-capacity memory on this host)"
		b.BackedBy = Default
		if restricted {
			b.Memory = "capacity memory on NUMA nodes " + numa.FormatList(b.Nodes)
			b.BackedBy = LargeCap
		}
	case HighBw:
		b.Memory = "default host memory (no high-bandwidth memory on this host)"
		b.BackedBy = Default
		if restricted {
			b.Memory = "high-bandwidth memory on NUMA nodes " + numa.FormatList(b.Nodes)
			b.BackedBy = HighBw
		}
	case LowLat:
		b.Memory = "default host memory (no low-latency memory on this host)"
		b.BackedBy = Default
	case Const:
		b.Memory = "default host memory (no read-only memory on this host; writes are not trapped)"
		b.BackedBy = Default
	case TargetHost:
		b.Kind = "target-host"
		b.Memory = "page-locked host memory allocated by the device driver"
	case TargetShared:
		b.Kind = "target-shared"
		b.Memory = "memory shared by host and device, allocated by the device driver"
	case TargetDevice:
		b.Kind = "target-device"
		b.Memory = "device memory allocated by the device driver (not host-addressable)"
	default:
		b.Kind = "unknown"
		if d, ok := DevicesOf(id); ok && d.Nodes != nil {
			b.Kind = "host"
			b.BackedBy = d.Base
			b.Memory = fmt.Sprintf("%v memory on NUMA nodes %s", d.Base, numa.FormatList(d.Nodes))
		} else if id.runtimeRange() {
			b.Memory = "a memory space made at run time; ask the runtime that made it"
		} else {
			b.Memory = "not a memory space"
		}
	}
	return b
}
