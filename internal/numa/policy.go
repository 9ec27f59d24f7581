package numa

import (
	"errors"
	"fmt"
	"slices"
)

// ErrUnsupported: memory policies cannot be set on this system (not Linux).
var ErrUnsupported = errors.New("ompalloc: numa: memory policies are not supported on this system")

// ErrPolicy wraps every refusal of a policy by the kernel; the errno is
// wrapped too (errors.Is(err, syscall.EINVAL)).
var ErrPolicy = errors.New("ompalloc: numa: memory policy refused")

// Mode is a kernel memory policy mode (MPOL_* of linux/mempolicy.h).
type Mode int

// The modes this package sets or reads back.
const (
	ModeDefault       Mode = 0 // MPOL_DEFAULT: the process (or system) policy
	ModePreferred     Mode = 1 // MPOL_PREFERRED: one node first, others when it is full
	ModeBind          Mode = 2 // MPOL_BIND: only these nodes
	ModeInterleave    Mode = 3 // MPOL_INTERLEAVE: pages round-robin over the nodes
	ModeLocal         Mode = 4 // MPOL_LOCAL: the node of the CPU that faults the page in
	ModePreferredMany Mode = 5 // MPOL_PREFERRED_MANY
	ModeWeighted      Mode = 6 // MPOL_WEIGHTED_INTERLEAVE
)

// String names a mode the way /proc/self/numa_maps does.
func (m Mode) String() string {
	switch m {
	case ModeDefault:
		return "default"
	case ModePreferred:
		return "prefer"
	case ModeBind:
		return "bind"
	case ModeInterleave:
		return "interleave"
	case ModeLocal:
		return "local"
	case ModePreferredMany:
		return "prefer (many)"
	case ModeWeighted:
		return "weighted interleave"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Partition is how an allocator's memory is spread over its nodes: the
// OpenMP partition trait.
type Partition int

// The OpenMP partition values.
const (
	Environment Partition = iota // nothing set: the process's policy decides
	Nearest                      // the node of the thread that touches the memory first
	Blocked                      // contiguous parts, one per node, in node order
	Interleaved                  // pages, or part_size parts, round-robin over the nodes
)

func (p Partition) String() string {
	switch p {
	case Environment:
		return "environment"
	case Nearest:
		return "nearest"
	case Blocked:
		return "blocked"
	case Interleaved:
		return "interleaved"
	}
	return fmt.Sprintf("partition(%d)", int(p))
}

// Spec says where a range's memory goes.
type Spec struct {
	Partition Partition
	// Nodes are the resources of the memory space, ascending; nil means
	// every node the process may use (the policy then names none, or all
	// of Topology's nodes for blocked and interleaved).
	Nodes []int
	// PartSize is the interleaving unit in bytes; at most a page (or 0)
	// lets the kernel interleave page by page. It is rounded up to the page
	// size, as OpenMP allows.
	PartSize uintptr
}

// Key is a string naming the spec, equal for specs that place memory alike.
func (s Spec) Key() string {
	return fmt.Sprintf("%v/%s/%d", s.Partition, FormatList(s.Nodes), s.PartSize)
}

// MaxParts bounds the parts of one range interleaved by part_size: each part
// splits the mapping, and the kernel allows a process 65530 mappings by
// default. A part_size that would cut a range into more is raised to
// range/MaxParts (rounded up to pages), as OpenMP lets part_size be rounded.
const MaxParts = 64

// Part is one mbind(2) call of a plan: [Off, Off+Len) gets Mode on Nodes.
type Part struct {
	Off, Len uintptr
	Mode     Mode
	Nodes    []int
}

// Plan splits a range of n bytes (a multiple of pageSize, as chunks and
// regions are) into the parts to bind for s. all is the machine's node
// list, used when s.Nodes is nil. Environment over all nodes needs no
// call: the plan is empty; over a subset it binds the range to the subset. Nearest is MPOL_LOCAL over all nodes, and MPOL_PREFERRED on the
// first of s.Nodes otherwise (the caller orders s.Nodes nearest first).
func Plan(n, pageSize uintptr, s Spec, all []int) []Part {
	if n == 0 || pageSize == 0 {
		return nil
	}
	nodes := s.Nodes
	switch s.Partition {
	case Nearest:
		if nodes == nil {
			return []Part{{0, n, ModeLocal, nil}}
		}
		return []Part{{0, n, ModePreferred, nodes[:1]}}
	case Environment:
		if nodes == nil {
			return nil
		}
		return []Part{{0, n, ModeBind, unique(nodes)}}
	case Blocked, Interleaved:
	default:
		return nil
	}
	if nodes == nil {
		nodes = all
	}
	nodes = unique(nodes)
	if len(nodes) == 0 {
		return nil
	}
	if len(nodes) == 1 {
		return []Part{{0, n, ModeBind, nodes}}
	}
	roundUp := func(x uintptr) uintptr { return (x + pageSize - 1) / pageSize * pageSize }
	var parts []Part
	switch s.Partition {
	case Blocked:
		size := roundUp((n + uintptr(len(nodes)) - 1) / uintptr(len(nodes)))
		for i, off := 0, uintptr(0); off < n; i, off = i+1, off+size {
			parts = append(parts, Part{off, min(size, n-off), ModeBind, nodes[i : i+1]})
		}
	case Interleaved:
		ps := roundUp(s.PartSize)
		if ps <= pageSize {
			return []Part{{0, n, ModeInterleave, nodes}}
		}
		// Every part is a mapping of its own (vm.max_map_count is 65530):
		// at most MaxParts per range, larger parts beyond that.
		ps = max(ps, roundUp((n+MaxParts-1)/MaxParts))
		for i, off := 0, uintptr(0); off < n; i, off = i+1, off+ps {
			parts = append(parts, Part{off, min(ps, n-off), ModeBind, nodes[i%len(nodes) : i%len(nodes)+1]})
		}
	}
	return parts
}

// Apply binds every part of plan, relative to p, with mbind(2). The first
// refusal stops it and names the part, the mode and the errno.
func Apply(p uintptr, plan []Part) error { return apply(p, plan, 0) }

// ApplyMoving is Apply for memory that may already hold pages: they are
// moved to the policy's nodes (MPOL_MF_MOVE) rather than left where they
// are.
func ApplyMoving(p uintptr, plan []Part) error { return apply(p, plan, mpolMFMove) }

const mpolMFMove = 1 << 1

func apply(p uintptr, plan []Part, flags uintptr) error {
	for _, pt := range plan {
		if err := mbind(p+pt.Off, pt.Len, pt.Mode, pt.Nodes, flags); err != nil {
			return fmt.Errorf("%w: mbind %#x+%d %v %s: %w", ErrPolicy, p+pt.Off, pt.Len, pt.Mode, FormatList(pt.Nodes), err)
		}
	}
	return nil
}

// unique drops repeated nodes, keeping the first of each.
func unique(nodes []int) []int {
	out := make([]int, 0, len(nodes))
	for _, n := range nodes {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// nodeMask packs node numbers into the kernel's bitmask of longs.
func nodeMask(nodes []int) []uint64 {
	if len(nodes) == 0 {
		return nil
	}
	m := make([]uint64, slices.Max(nodes)/64+1)
	for _, n := range nodes {
		m[n/64] |= 1 << (n % 64)
	}
	return m
}

func maskNodes(m []uint64) []int {
	var out []int
	for i, w := range m {
		for b := 0; b < 64; b++ {
			if w&(1<<b) != 0 {
				out = append(out, i*64+b)
			}
		}
	}
	return out
}
