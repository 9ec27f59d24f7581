// Package numa reads the host's NUMA topology from sysfs and applies memory
// policies to address ranges with mbind(2), without libnuma, hwloc or cgo.
//
// # Topology
//
// Read(root) reads /sys/devices/system/node under root (root "/" on a real
// machine; tests pass fixture trees from testdata): the nodes, their CPUs,
// memory size, distances, huge pages, the HMAT attributes of
// access0/initiators (bandwidth in MB/s, latency in ns) and the kernel's
// memory tiers (/sys/devices/virtual/memory_tiering). A missing or odd sysfs
// is never an error: it reads as one node holding every CPU, so a caller
// always has a node 0 to place memory on (macOS, containers without /sys).
// System reads the real tree once, at first use.
//
// From the topology Tiers derives which nodes are high-bandwidth memory
// (HBM in flat mode, by HMAT bandwidth or a faster memory tier) and which
// are capacity memory (CPU-less nodes in a slower tier or with lower HMAT
// bandwidth: CXL expanders, the kind of node large_cap means), each with the
// reason in words.
//
// # Policies
//
// Plan splits a range into parts with the policy each should get, for the
// OpenMP partition trait (environment, nearest, blocked, interleaved, with
// part_size); Apply hands every part to mbind(2). Both know nothing of
// allocators: package alloc applies them per chunk of its heaps, never per
// block. GetPolicy (get_mempolicy with MPOL_F_ADDR) and PageNodes
// (move_pages with no target) read back what the kernel did. On systems
// other than Linux, Apply returns ErrUnsupported. CurrentNode asks
// getcpu(2) for the calling thread's node; FastNode reads it from the CPU
// without a system call where Linux makes that possible (RDTSCP on amd64).
//
// Nothing below this package knows about allocators, and it knows no
// devices: the node of a PCI device is read from a bus id the caller
// supplies (PCINode).
package numa
