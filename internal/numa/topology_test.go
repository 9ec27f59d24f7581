package numa_test

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/numa/numatest"
)

const gib = 1 << 30

func TestParseList(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		err  string
	}{
		{"", nil, ""},
		{"\n", nil, ""},
		{"0", []int{0}, ""},
		{"0-3\n", []int{0, 1, 2, 3}, ""},
		{"0-1,8,10-11", []int{0, 1, 8, 10, 11}, ""},
		{"3,1-2,1", []int{1, 2, 3}, ""},
		{"0-x", nil, "bad range"},
		{"a", nil, "not a number"},
		{"3-1", nil, "bad range"},
		{"-1", nil, "not a number"},
		{"0-99999999", nil, "too long"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := numa.ParseList(c.in)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			if got != nil {
				back, _ := numa.ParseList(numa.FormatList(got))
				require.Equal(t, got, back)
			}
		})
	}
	require.Equal(t, "0-3,8,10-11", numa.FormatList([]int{0, 1, 2, 3, 8, 10, 11}))
	require.Equal(t, "", numa.FormatList(nil))
}

func TestReadFixtures(t *testing.T) {
	type want struct {
		ids       []int
		cpus      map[int]int // node -> number of CPUs
		memOnly   []int
		dist      [][3]int // a, b, distance
		tiers     map[int]int
		hugeSizes []uint64
		thp       string
		synthetic bool
		highBw    []int
		largeCap  []int
	}
	cases := map[string]want{
		"two-socket": {
			ids: []int{0, 1}, cpus: map[int]int{0: 32, 1: 32},
			dist:      [][3]int{{0, 0, 10}, {0, 1, 21}, {1, 0, 21}},
			tiers:     map[int]int{0: 4, 1: 4},
			hugeSizes: []uint64{2 << 20, 1 << 30}, thp: "madvise",
			largeCap: []int{0, 1},
		},
		"xeon-max-flat": {
			ids: []int{0, 1, 2, 3}, cpus: map[int]int{0: 56, 1: 56, 2: 0, 3: 0}, memOnly: []int{2, 3},
			dist:      [][3]int{{0, 2, 13}, {0, 3, 23}, {1, 3, 13}},
			tiers:     map[int]int{0: 4, 3: 4},
			hugeSizes: []uint64{2 << 20}, thp: "always",
			highBw: []int{2, 3}, largeCap: []int{0, 1, 2, 3},
		},
		"cxl": {
			ids: []int{0, 1}, cpus: map[int]int{0: 32, 1: 0}, memOnly: []int{1},
			dist: [][3]int{{0, 1, 20}}, tiers: map[int]int{0: 4, 1: 22},
			hugeSizes: []uint64{2 << 20}, thp: "madvise",
			largeCap: []int{1},
		},
		"cxl-tiers-only": {
			ids: []int{0, 1}, cpus: map[int]int{0: 32, 1: 0}, memOnly: []int{1},
			tiers: map[int]int{0: 4, 1: 22}, largeCap: []int{1},
		},
		"gh200": {
			ids: []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, cpus: map[int]int{0: 72, 1: 0, 8: 0}, memOnly: []int{1},
			dist:      [][3]int{{0, 1, 80}, {8, 8, 10}},
			tiers:     map[int]int{0: 4, 1: 4, 2: -1},
			hugeSizes: []uint64{2 << 20, 512 << 20}, thp: "always",
			largeCap: []int{0, 1},
		},
		// Taken from the guest of scripts/numa-vm.sh (NUMA_VM_SYSFS): Debian's
		// 6.1 kernel under qemu, HMAT, initiators as symlinks, access1 too.
		"qemu-hmat": {
			ids: []int{0, 1, 2, 3}, cpus: map[int]int{0: 2, 1: 2, 2: 0, 3: 0}, memOnly: []int{2, 3},
			dist:      [][3]int{{0, 1, 21}, {0, 2, 14}, {1, 3, 14}, {2, 3, 28}},
			tiers:     map[int]int{0: 4, 1: 4, 2: 4, 3: 4},
			hugeSizes: []uint64{2 << 20, 1 << 30}, thp: "always",
			highBw: []int{2}, largeCap: []int{3},
		},
		// The same guest without HMAT, node 3's memory onlined through
		// dax_hmem and kmem (NUMA_VM_TOPOLOGY=tiers): the kernel's dax tier.
		"qemu-tiers": {
			ids: []int{0, 1, 2, 3}, cpus: map[int]int{0: 2, 1: 2, 2: 0, 3: 0}, memOnly: []int{2, 3},
			dist:      [][3]int{{0, 1, 21}, {1, 3, 14}},
			tiers:     map[int]int{0: 4, 1: 4, 2: 4, 3: 22},
			hugeSizes: []uint64{2 << 20, 1 << 30}, thp: "always",
			largeCap: []int{3},
		},
		"single": {
			ids: []int{0}, cpus: map[int]int{0: 2}, dist: [][3]int{{0, 0, 10}},
			tiers: map[int]int{0: 4}, hugeSizes: []uint64{2 << 20, 1 << 30}, thp: "madvise",
			largeCap: []int{0},
		},
		"none": {
			ids: []int{0}, cpus: map[int]int{0: runtime.NumCPU()}, dist: [][3]int{{0, 0, 10}},
			tiers: map[int]int{0: -1}, synthetic: true, largeCap: []int{0},
		},
		"odd": {
			// node 5 is not online; node 0's cpulist and distances are garbage.
			ids: []int{0, 1}, cpus: map[int]int{0: 0, 1: 4},
			dist:  [][3]int{{0, 1, -1}, {1, 0, -1}},
			tiers: map[int]int{0: -1, 1: -1}, largeCap: []int{0, 1},
		},
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			top := numa.Read("testdata/" + name)
			require.Equal(t, w.ids, top.IDs())
			require.Equal(t, w.synthetic, top.Synthetic)
			if w.synthetic {
				require.Contains(t, top.Note, "unreadable")
			}
			for id, n := range w.cpus {
				nd, ok := top.Node(id)
				require.True(t, ok)
				require.Len(t, nd.CPUs, n, "node %d", id)
			}
			var memOnly []int
			for _, n := range top.Nodes {
				if n.MemoryOnly() {
					memOnly = append(memOnly, n.ID)
				}
			}
			require.Equal(t, w.memOnly, memOnly)
			for _, d := range w.dist {
				require.Equal(t, d[2], top.Distance(d[0], d[1]), "distance %d->%d", d[0], d[1])
			}
			for id, tier := range w.tiers {
				nd, _ := top.Node(id)
				require.Equal(t, tier, nd.Tier, "tier of node %d", id)
			}
			require.Equal(t, w.hugeSizes, top.HugePageSizes)
			require.Equal(t, w.thp, top.THP)
			tr := top.Tiers()
			require.Equal(t, w.highBw, tr.HighBw, tr.HighBwWhy)
			require.Equal(t, w.largeCap, tr.LargeCap, tr.LargeCapWhy)
			require.NotEmpty(t, tr.HighBwWhy)
			require.NotEmpty(t, tr.LargeCapWhy)
			_, err := json.Marshal(top)
			require.NoError(t, err)
		})
	}
}

func TestReadDetails(t *testing.T) {
	top := numa.Read("testdata/two-socket")
	n0, _ := top.Node(0)
	require.Equal(t, uint64(263921276)<<10, n0.MemTotal)
	require.Equal(t, uint64(263921276/2)<<10, n0.MemFree)
	require.Equal(t, []numa.HugePages{{Size: 2 << 20, Total: 512, Free: 500}, {Size: 1 << 30}}, n0.HugePages)
	require.Equal(t, 1, top.NodeOfCPU(50))
	require.Equal(t, 0, top.NodeOfCPU(47))
	require.Equal(t, -1, top.NodeOfCPU(64))
	require.Equal(t, -1, top.Distance(0, 7))
	require.Equal(t, -1, top.Distance(7, 0))
	require.Empty(t, n0.Note)

	odd := numa.Read("testdata/odd")
	o0, _ := odd.Node(0)
	require.Contains(t, o0.Note, "cpulist: list \"0-x\": bad range")
	require.Contains(t, o0.Note, `distance: "oops" is not a number`)
	require.False(t, o0.MemoryOnly(), "an unreadable cpulist does not make a memory-only node")
	o1, _ := odd.Node(1)
	require.Contains(t, o1.Note, "distance: 1 entries for 2 nodes")
	require.Zero(t, o1.MemTotal, "garbage meminfo reads as unknown")

	xm := numa.Read("testdata/xeon-max-flat")
	n2, _ := xm.Node(2)
	require.Equal(t, &numa.Access{Initiators: []int{0}, ReadBandwidth: 524288, WriteBandwidth: 524288, ReadLatency: 130, WriteLatency: 130}, n2.Access)
	require.Equal(t, uint64(64)*gib, n2.MemTotal)
	tr := xm.Tiers()
	require.Contains(t, tr.HighBwWhy, "node 2: HMAT read bandwidth 524288 MB/s > 131072 MB/s")
	// Nearest: from node 1 the HBM near it is node 3; a node is nearest to itself.
	require.Equal(t, 3, xm.Nearest(1, tr.HighBw))
	require.Equal(t, 2, xm.Nearest(0, tr.HighBw))
	require.Equal(t, 1, xm.Nearest(1, []int{0, 1, 2, 3}))
	require.Equal(t, -1, xm.Nearest(1, nil))

	cxl := numa.Read("testdata/cxl-tiers-only").Tiers()
	require.Contains(t, cxl.LargeCapWhy, "memory tier 22, slower than the CPU nodes' tier 4")
	require.Nil(t, cxl.HighBw)
	require.Contains(t, cxl.HighBwWhy, "default memory")

	// The GH200's GPU memory node is neither: its tier is the CPU node's
	// and no HMAT figure says otherwise; the empty placeholders count nowhere.
	gh := numa.Read("testdata/gh200").Tiers()
	require.Equal(t, []int{0, 1}, gh.Default)
}

// TestSystem reads this machine: whatever it is, there is a node, and on
// Linux with sysfs the nodes are those of /sys/devices/system/node.
func TestSystem(t *testing.T) {
	top := numa.System()
	require.Same(t, top, numa.System(), "read once")
	require.NotEmpty(t, top.Nodes)
	if _, err := os.Stat("/sys/devices/system/node/node0"); err == nil {
		require.False(t, top.Synthetic)
		b, err := os.ReadFile("/sys/devices/system/node/node0/cpulist")
		require.NoError(t, err)
		cpus, err := numa.ParseList(string(b))
		require.NoError(t, err)
		n0, ok := top.Node(0)
		require.True(t, ok)
		require.Equal(t, cpus, n0.CPUs)
		require.NotZero(t, n0.MemTotal)
	} else {
		require.True(t, top.Synthetic)
	}
}

func ExampleTopology_Tiers() {
	top := numa.Read("testdata/xeon-max-flat")
	tr := top.Tiers()
	fmt.Println("nodes:", numa.FormatList(top.IDs()))
	fmt.Println("high_bw:", numa.FormatList(tr.HighBw))
	fmt.Println("large_cap:", numa.FormatList(tr.LargeCap))
	// Output:
	// nodes: 0-3
	// high_bw: 2-3
	// large_cap: 0-3
}

// TestReadGuestSysfs: the sysfs of a real kernel (the qemu guest's) has
// initiators as symlinks and access1 beside access0; both read as the
// fixtures written by hand do, and the PCI device sits on node 1.
func TestReadGuestSysfs(t *testing.T) {
	const root = "testdata/qemu-hmat"
	fi, err := os.Lstat(root + "/sys/devices/system/node/node3/access0/initiators/node1")
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSymlink, "an initiator is a symlink in real sysfs")
	top := numa.Read(root)
	for _, c := range []struct {
		node, initiator int
		readBW, readLat uint64
	}{{0, 0, 102400, 80}, {1, 1, 102400, 80}, {2, 0, 409600, 90}, {3, 1, 20480, 300}} {
		n, ok := top.Node(c.node)
		require.True(t, ok)
		require.NotNil(t, n.Access, "node %d", c.node)
		require.Equal(t, []int{c.initiator}, n.Access.Initiators, "node %d", c.node)
		require.Equal(t, c.readBW, n.Access.ReadBandwidth, "node %d", c.node)
		require.Equal(t, c.readLat, n.Access.ReadLatency, "node %d", c.node)
	}
	tr := top.Tiers()
	require.Contains(t, tr.HighBwWhy, "node 2: HMAT read bandwidth 409600 MB/s > 102400 MB/s")
	require.Contains(t, tr.LargeCapWhy, "node 3: memory-only, HMAT read bandwidth 20480 MB/s < 102400 MB/s")
	require.Equal(t, 2, top.Nearest(0, []int{2, 3}))
	require.Equal(t, 3, top.Nearest(1, []int{2, 3}))
	n, ok := numa.PCINode(numatest.PCIRoot(t, root), "0000:81:00.0") // the bus ids without ':' (numatest)
	require.True(t, ok)
	require.Equal(t, 1, n, "the PCIe device behind node 1's host bridge")
}

// TestReadGuestTiers: on the guest whose kernel built a slower tier (dax
// memory through kmem, no HMAT), large_cap is decided by the memory tier.
func TestReadGuestTiers(t *testing.T) {
	top := numa.Read("testdata/qemu-tiers")
	for _, n := range top.Nodes {
		require.Nil(t, n.Access, "node %d: no HMAT in this guest", n.ID)
	}
	tr := top.Tiers()
	require.Equal(t, []int{3}, tr.LargeCap)
	require.Contains(t, tr.LargeCapWhy, "node 3: memory-only, memory tier 22, slower than the CPU nodes' tier 4")
	require.Nil(t, tr.HighBw, "node 2 sits in the CPU nodes' tier")
}

// TestReadGuestHBMCXL: the sysfs of Debian's 6.12 kernel on the two-socket
// guest (NUMA_VM_TOPOLOGY=hbm-cxl; issue 29 item 11). From 6.10 the kernel
// builds memory tiers from HMAT: HBM (nodes 2, 3) in a tier above the CPU
// nodes' DRAM, CXL (node 4) below. HMAT and the tiers alone each classify
// the nodes the same way, so the tier path (machines whose firmware gives
// tiers but no HMAT figures we read) is checked on a real kernel's tiers;
// each socket's HBM is the nearest to its CPUs.
func TestReadGuestHBMCXL(t *testing.T) {
	top := numa.Read("testdata/qemu-hbm-cxl")
	require.Equal(t, []int{0, 1, 2, 3, 4}, top.IDs())
	for id, tier := range map[int]int{0: 4, 1: 4, 2: 1, 3: 1, 4: 56} {
		n, ok := top.Node(id)
		require.True(t, ok)
		require.Equal(t, tier, n.Tier, "node %d", id)
		require.NotNil(t, n.Access, "node %d: HMAT", id)
	}
	hmat := top.Tiers()
	require.Equal(t, []int{2, 3}, hmat.HighBw)
	require.Equal(t, []int{4}, hmat.LargeCap)
	require.Contains(t, hmat.HighBwWhy, "node 2: HMAT read bandwidth 524288 MB/s > 131072 MB/s")

	tiersOnly := *top
	tiersOnly.Nodes = slices.Clone(top.Nodes)
	for i := range tiersOnly.Nodes {
		tiersOnly.Nodes[i].Access = nil
	}
	tr := tiersOnly.Tiers()
	require.Equal(t, hmat.HighBw, tr.HighBw)
	require.Equal(t, hmat.LargeCap, tr.LargeCap)
	require.Contains(t, tr.HighBwWhy, "node 3: memory tier 1, faster than the CPU nodes' tier 4")
	require.Contains(t, tr.LargeCapWhy, "node 4: memory-only, memory tier 56, slower than the CPU nodes' tier 4")

	require.Equal(t, 2, top.Nearest(0, hmat.HighBw), "socket 0's HBM")
	require.Equal(t, 3, top.Nearest(1, hmat.HighBw), "socket 1's HBM")
	require.Equal(t, 13, top.Distance(1, 3))
	require.Equal(t, 32, top.Distance(1, 4))
}

// TestSystemTiersAgreeWithHMAT: on a kernel that builds memory tiers from
// HMAT (>= 6.10; the hbm-cxl guest), classifying this machine's nodes by
// the tiers alone gives what HMAT gives. It skips where the kernel puts
// every node in one tier (6.1) or there are no HMAT figures.
func TestSystemTiersAgreeWithHMAT(t *testing.T) {
	top := numa.System()
	hmat := top.Tiers()
	tiers := map[int]bool{}
	withHMAT := false
	for _, n := range top.Nodes {
		if n.MemTotal > 0 && n.Tier >= 0 {
			tiers[n.Tier] = true
		}
		withHMAT = withHMAT || n.Access != nil && n.Access.ReadBandwidth > 0
	}
	if len(tiers) < 2 || !withHMAT {
		t.Skipf("needs HMAT and at least two memory tiers (a kernel >= 6.10 with HMAT: NUMA_VM_TOPOLOGY=hbm-cxl); this machine has %d tiers, HMAT %v", len(tiers), withHMAT)
	}
	tiersOnly := *top
	tiersOnly.Nodes = slices.Clone(top.Nodes)
	for i := range tiersOnly.Nodes {
		tiersOnly.Nodes[i].Access = nil
	}
	tr := tiersOnly.Tiers()
	require.Equal(t, hmat.HighBw, tr.HighBw, "high_bw by HMAT (%s) and by tier (%s)", hmat.HighBwWhy, tr.HighBwWhy)
	require.Equal(t, hmat.LargeCap, tr.LargeCap, "large_cap by HMAT (%s) and by tier (%s)", hmat.LargeCapWhy, tr.LargeCapWhy)
}
