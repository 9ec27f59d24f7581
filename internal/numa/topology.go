package numa

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Node is one NUMA node as sysfs describes it.
type Node struct {
	ID        int         `json:"id"`
	CPUs      []int       `json:"cpus,omitempty"` // empty for a memory-only node
	MemTotal  uint64      `json:"mem_total"`      // bytes; 0 = not known
	MemFree   uint64      `json:"mem_free"`       // bytes
	Distances []int       `json:"distances"`      // to Topology.Nodes, in order (10 = itself)
	Tier      int         `json:"tier"`           // kernel memory tier (memory_tierN); -1 = not known
	Access    *Access     `json:"access,omitempty"`
	HugePages []HugePages `json:"huge_pages,omitempty"`
	Note      string      `json:"note,omitempty"` // what could not be read, if anything

	cpusKnown bool
}

// Access holds the HMAT attributes of access0/initiators: the performance
// of the node's memory seen from its nearest initiators.
type Access struct {
	Initiators     []int  `json:"initiators,omitempty"`
	ReadBandwidth  uint64 `json:"read_bandwidth_mbps"` // MB/s; 0 = not reported
	WriteBandwidth uint64 `json:"write_bandwidth_mbps"`
	ReadLatency    uint64 `json:"read_latency_ns"` // ns; 0 = not reported
	WriteLatency   uint64 `json:"write_latency_ns"`
}

// HugePages counts the persistent huge pages of one size on a node.
type HugePages struct {
	Size  uint64 `json:"size"` // bytes
	Total uint64 `json:"total"`
	Free  uint64 `json:"free"`
}

// MemoryOnly reports a node with memory and no CPUs: a CXL expander, HBM
// in flat mode, GPU memory exposed as a node.
// A node whose cpulist could not be read is not memory-only.
func (n *Node) MemoryOnly() bool { return n.cpusKnown && len(n.CPUs) == 0 && n.MemTotal > 0 }

// Topology is what the machine's sysfs says about its NUMA nodes.
type Topology struct {
	Nodes []Node `json:"nodes"` // ascending ID; never empty
	// Synthetic is set when sysfs had no usable node: Nodes is one made-up
	// node 0 with every CPU, and Note says why.
	Synthetic     bool     `json:"synthetic"`
	Note          string   `json:"note,omitempty"`
	HugePageSizes []uint64 `json:"huge_page_sizes,omitempty"` // bytes, ascending (/sys/kernel/mm/hugepages)
	THP           string   `json:"thp,omitempty"`             // transparent huge pages: always, madvise, never; "" = not known
}

// IDs returns the node numbers, ascending.
func (t *Topology) IDs() []int {
	ids := make([]int, len(t.Nodes))
	for i := range t.Nodes {
		ids[i] = t.Nodes[i].ID
	}
	return ids
}

// Node returns the node with number id.
func (t *Topology) Node(id int) (*Node, bool) {
	for i := range t.Nodes {
		if t.Nodes[i].ID == id {
			return &t.Nodes[i], true
		}
	}
	return nil, false
}

// Distance returns the kernel's distance from node a to node b, or -1 when
// either is unknown.
func (t *Topology) Distance(a, b int) int {
	na, ok := t.Node(a)
	if !ok {
		return -1
	}
	for i := range t.Nodes {
		if t.Nodes[i].ID == b && i < len(na.Distances) {
			return na.Distances[i]
		}
	}
	return -1
}

// NodeOfCPU returns the node holding cpu, or -1.
func (t *Topology) NodeOfCPU(cpu int) int {
	for i := range t.Nodes {
		if _, ok := slices.BinarySearch(t.Nodes[i].CPUs, cpu); ok {
			return t.Nodes[i].ID
		}
	}
	return -1
}

// Nearest returns, among candidates, the node nearest to node from (the
// smallest distance; ties to the lower number). from itself wins when it is
// a candidate. -1 when candidates is empty.
func (t *Topology) Nearest(from int, candidates []int) int {
	best, bestD := -1, int(^uint(0)>>1)
	for _, c := range candidates {
		d := t.Distance(from, c)
		if c == from {
			d = -1
		} else if d < 0 {
			d = int(^uint(0) >> 2) // unknown distances lose to known ones
		}
		if d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

var (
	sysOnce sync.Once
	sysTopo *Topology
)

// System returns the topology of this machine, read once at first use.
// Callers must not modify it.
func System() *Topology {
	sysOnce.Do(func() { sysTopo = Read("/") })
	return sysTopo
}

// Read reads the topology under root ("/" for the machine; a fixture tree in
// tests). It never fails: what cannot be read is left unknown, and without
// any readable node the result is one synthetic node.
func Read(root string) *Topology {
	t := &Topology{}
	base := filepath.Join(root, "sys/devices/system/node")
	ids, why := nodeIDs(base)
	for _, id := range ids {
		t.Nodes = append(t.Nodes, readNode(filepath.Join(base, "node"+strconv.Itoa(id)), id))
	}
	if len(t.Nodes) == 0 {
		t.Synthetic = true
		t.Note = why
		cpus := make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = i
		}
		t.Nodes = []Node{{ID: 0, CPUs: cpus, Distances: []int{10}, Tier: -1, cpusKnown: true}}
	}
	// A distance row must have one entry per node; anything else is odd
	// and reads as unknown (a row of 10 to itself, 20 elsewhere would be a
	// guess).
	for i := range t.Nodes {
		if d := t.Nodes[i].Distances; d != nil && len(d) != len(t.Nodes) {
			t.Nodes[i].Distances = nil
			t.Nodes[i].Note = strings.TrimPrefix(t.Nodes[i].Note+fmt.Sprintf("; distance: %d entries for %d nodes", len(d), len(t.Nodes)), "; ")
		}
	}
	readTiers(filepath.Join(root, "sys/devices/virtual/memory_tiering"), t)
	t.HugePageSizes = hugeSizes(filepath.Join(root, "sys/kernel/mm/hugepages"))
	if b, err := os.ReadFile(filepath.Join(root, "sys/kernel/mm/transparent_hugepage/enabled")); err == nil {
		t.THP = selected(string(b))
	}
	return t
}

// nodeIDs lists the online nodes: the "online" list, else the nodeN folders.
func nodeIDs(base string) ([]int, string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Sprintf("no NUMA information (%s unreadable)", base)
	}
	var dirs []int
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "node"); ok {
			if id, err := strconv.Atoi(n); err == nil && id >= 0 {
				dirs = append(dirs, id)
			}
		}
	}
	slices.Sort(dirs)
	if b, err := os.ReadFile(filepath.Join(base, "online")); err == nil {
		if online, err := ParseList(string(b)); err == nil && len(online) > 0 {
			var ids []int
			for _, id := range online {
				if _, ok := slices.BinarySearch(dirs, id); ok {
					ids = append(ids, id)
				}
			}
			if len(ids) > 0 {
				return ids, ""
			}
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Sprintf("no NUMA node in %s", base)
	}
	return dirs, ""
}

func readNode(dir string, id int) Node {
	n := Node{ID: id, Tier: -1}
	var odd []string
	if b, err := os.ReadFile(filepath.Join(dir, "cpulist")); err == nil {
		var perr error
		n.CPUs, perr = ParseList(string(b))
		n.cpusKnown = perr == nil
		if perr != nil {
			odd = append(odd, "cpulist: "+perr.Error())
		}
	} else {
		odd = append(odd, "no cpulist")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "meminfo")); err == nil {
		n.MemTotal = meminfoField(string(b), "MemTotal")
		n.MemFree = meminfoField(string(b), "MemFree")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "distance")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			d, err := strconv.Atoi(f)
			if err != nil {
				n.Distances = nil
				odd = append(odd, fmt.Sprintf("distance: %q is not a number", f))
				break
			}
			n.Distances = append(n.Distances, d)
		}
	}
	n.Access = readAccess(filepath.Join(dir, "access0", "initiators"))
	if ents, err := os.ReadDir(filepath.Join(dir, "hugepages")); err == nil {
		for _, e := range ents {
			size, ok := hugeDirSize(e.Name())
			if !ok {
				continue
			}
			hp := HugePages{Size: size}
			hp.Total = readUint(filepath.Join(dir, "hugepages", e.Name(), "nr_hugepages"))
			hp.Free = readUint(filepath.Join(dir, "hugepages", e.Name(), "free_hugepages"))
			n.HugePages = append(n.HugePages, hp)
		}
		slices.SortFunc(n.HugePages, func(a, b HugePages) int { return int(a.Size>>12) - int(b.Size>>12) })
	}
	n.Note = strings.Join(odd, "; ")
	return n
}

// meminfoField reads "Node 0 MemTotal:  3892968 kB" lines, in bytes.
func meminfoField(s, name string) uint64 {
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == name+":" {
				v, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					return 0
				}
				if i+2 < len(f) && f[i+2] == "kB" {
					v <<= 10
				}
				return v
			}
		}
	}
	return 0
}

func readUint(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func readAccess(dir string) *Access {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	a := &Access{
		ReadBandwidth:  readUint(filepath.Join(dir, "read_bandwidth")),
		WriteBandwidth: readUint(filepath.Join(dir, "write_bandwidth")),
		ReadLatency:    readUint(filepath.Join(dir, "read_latency")),
		WriteLatency:   readUint(filepath.Join(dir, "write_latency")),
	}
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "node"); ok {
			if id, err := strconv.Atoi(n); err == nil {
				a.Initiators = append(a.Initiators, id)
			}
		}
	}
	slices.Sort(a.Initiators)
	if a.ReadBandwidth == 0 && a.WriteBandwidth == 0 && a.ReadLatency == 0 && a.WriteLatency == 0 && len(a.Initiators) == 0 {
		return nil
	}
	return a
}

// readTiers sets Node.Tier from memory_tierN/nodelist.
func readTiers(dir string, t *Topology) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "memory_tier")
		if !ok {
			continue
		}
		tier, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "nodelist"))
		if err != nil {
			continue
		}
		ids, err := ParseList(string(b))
		if err != nil {
			continue
		}
		for _, id := range ids {
			if nd, ok := t.Node(id); ok {
				nd.Tier = tier
			}
		}
	}
}

// hugeDirSize parses "hugepages-2048kB".
func hugeDirSize(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "hugepages-")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "kB")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v << 10, true
}

func hugeSizes(dir string) []uint64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, e := range ents {
		if s, ok := hugeDirSize(e.Name()); ok {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// selected returns the bracketed word of "always [madvise] never".
func selected(s string) string {
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			return strings.Trim(f, "[]")
		}
	}
	return ""
}

// PoolNodes returns the nodes a pinned pool of a device on node devNode
// (-1: unknown, or the host) keeps a heap for: nil for one heap (a known
// device node, or fewer than two nodes with CPUs and memory), else every
// node with CPUs and memory, ascending. Package alloc splits its pools so;
// ompalloc info shows it for pools not made yet.
func (t *Topology) PoolNodes(devNode int) []int {
	if devNode >= 0 {
		if _, ok := t.Node(devNode); ok {
			return nil
		}
	}
	var nodes []int
	for _, n := range t.Nodes {
		if len(n.CPUs) > 0 && n.MemTotal > 0 {
			nodes = append(nodes, n.ID)
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	return nodes
}
