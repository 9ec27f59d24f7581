package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/envsize"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/pinlimit"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/traitenv"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

const infoUsage = `Usage: ompalloc info [--json]

Shows what the runtime sees on this machine: drivers, devices, memory
spaces, NUMA nodes, allocators, OMP_ALLOCATOR, RLIMIT_MEMLOCK and VmLck, the pinned-bytes
limit, and each device's pinned registry. --json writes the same as one JSON
object (schema "ompalloc-info/1", see the package documentation).

Flags:
`

// InfoSchema names the JSON layout of `ompalloc info --json`; it changes
// only when a field is removed or changes meaning.
const InfoSchema = "ompalloc-info/1"

// InfoReport is `ompalloc info --json`.
type InfoReport struct {
	Schema        string          `json:"schema"`
	Version       string          `json:"version"`
	Go            string          `json:"go"`
	OS            string          `json:"os"`
	Arch          string          `json:"arch"`
	CPUs          int             `json:"cpus"`
	Drivers       []DriverInfo    `json:"drivers"`
	NumDevices    int             `json:"num_devices"`
	InitialDevice int             `json:"initial_device"`
	DefaultDevice int             `json:"default_device"`
	Devices       []DeviceInfo    `json:"devices"`
	NUMA          NUMAInfo        `json:"numa"`
	Memspaces     []MemspaceInfo  `json:"memspaces"`
	Allocators    []AllocatorInfo `json:"allocators"`
	OMPAllocator  EnvAllocator    `json:"omp_allocator"`
	Memlock       MemlockInfo     `json:"memlock"`
	Pinned        PinnedInfo      `json:"pinned"`
	Errors        []string        `json:"errors,omitempty"`
}

// DriverInfo is one plugin's driver.
type DriverInfo struct {
	Plugin  string `json:"plugin"`
	Library string `json:"library"` // path loaded; "" when none
	Version string `json:"version"`
	Init    string `json:"init"` // the init result by the driver's name for it, or why there is none
	Usable  bool   `json:"usable"`
	Error   string `json:"error,omitempty"`
	Advice  string `json:"advice,omitempty"` // target.DriverError's: what the error means here, what to do
}

// DeviceInfo is one OpenMP device.
type DeviceInfo struct {
	Number      int          `json:"number"`
	Plugin      string       `json:"plugin"`
	Initial     bool         `json:"initial"`
	Default     bool         `json:"default"`
	Name        string       `json:"name"`
	Vendor      string       `json:"vendor"`
	MemoryBytes uint64       `json:"memory_bytes"`
	Capability  string       `json:"capability"`
	NUMANode    int          `json:"numa_node"` // -1: unknown
	Registry    RegistryInfo `json:"registry"`
	PinnedPool  PoolInfo     `json:"pinned_pool"`
	Usable      bool         `json:"usable"`          // info opens every device to tell
	Error       string       `json:"error,omitempty"` // why it cannot be used (it keeps its number)
}

// RegistryInfo is the state of a device's pinned registry.
type RegistryInfo struct {
	Entries         int    `json:"entries"`
	LockedBytes     uint64 `json:"locked_bytes"`
	ExternalBytes   uint64 `json:"external_bytes"`
	RegisteredBytes uint64 `json:"registered_bytes"`
	Hits            uint64 `json:"hits"`
	Misses          uint64 `json:"misses"`
}

// PoolInfo is a device's pinned pool: split per NUMA node (the host
// device, or one of unknown node, on a machine with two or more nodes with
// CPUs), or one heap on the device's node.
type PoolInfo struct {
	Nodes     []int          `json:"nodes"`      // nodes with a heap of their own; empty: one heap
	Heaps     []PoolHeapInfo `json:"heaps"`      // empty until a pinned allocator first uses the pool
	FarAllocs int64          `json:"far_allocs"` // allocations served by another node's heap
}

// PoolHeapInfo is one heap of a pinned pool.
type PoolHeapInfo struct {
	Node        int    `json:"node"` // -1: the pool's single heap
	LockedBytes uint64 `json:"locked_bytes"`
	IdleBytes   uint64 `json:"idle_bytes"`
	Chunks      int    `json:"chunks"`
	Huge        int    `json:"huge"`
	FarAllocs   int64  `json:"far_allocs"` // served to callers of other nodes
}

// MemspaceInfo is a predefined memory space and what backs it.
type MemspaceInfo struct {
	Handle   uint64 `json:"handle"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Memory   string `json:"memory"`
	BackedBy string `json:"backed_by"`
	Nodes    []int  `json:"nodes"`     // NUMA nodes of a host memory space; empty for target ones
	NodesWhy string `json:"nodes_why"` // why those nodes
}

// AllocatorInfo is a predefined allocator.
type AllocatorInfo struct {
	Handle   uint64 `json:"handle"`
	Name     string `json:"name"`
	Memspace string `json:"memspace"`
	Traits   string `json:"traits"` // those that differ from the defaults, in OMP_ALLOCATOR syntax
	Default  bool   `json:"default"`
}

// EnvAllocator is the OMP_ALLOCATOR in force.
type EnvAllocator struct {
	Set      bool   `json:"set"`
	Value    string `json:"value"`
	Resolved string `json:"resolved"` // the default allocator it gave
	Handle   uint64 `json:"handle"`
	Memspace string `json:"memspace"`
	Traits   string `json:"traits"`
	Warning  string `json:"warning,omitempty"` // why the value was not used
}

// MemlockInfo is RLIMIT_MEMLOCK and VmLck. -1 means unlimited (limits) or
// not available (VmLck, and limits on systems without them).
type MemlockInfo struct {
	SoftBytes  int64  `json:"soft_bytes"`
	HardBytes  int64  `json:"hard_bytes"`
	Soft       string `json:"soft"` // "unlimited", "8 MiB", "n/a"
	Hard       string `json:"hard"`
	VmLckBytes int64  `json:"vmlck_bytes"`
	VmLck      string `json:"vmlck"`
	CapIPCLock bool   `json:"cap_ipc_lock"` // the process may lock memory beyond the limit (root)
}

// PinnedInfo is the limit on bytes locked by pinned allocators, and the
// pages their chunks get.
type PinnedInfo struct {
	LimitBytes uint64        `json:"limit_bytes"` // 0: no limit
	UsedBytes  uint64        `json:"used_bytes"`
	Limit      string        `json:"limit"`
	Env        string        `json:"env"`               // OMPALLOC_PINNED_LIMIT as set, "" when unset
	Source     string        `json:"source"`            // where the limit came from
	Warning    string        `json:"warning,omitempty"` // a limit below one pinned chunk
	HugePages  HugePagesInfo `json:"huge_pages"`
}

// HugePagesInfo is the huge page mode of pinned chunks and the system's
// pool of 2 MiB hugetlb pages.
type HugePagesInfo struct {
	Mode          string `json:"mode"` // thp, off, hugetlb
	Env           string `json:"env"`  // OMPALLOC_HUGEPAGES as set, "" when unset
	HugeTLBBytes  uint64 `json:"hugetlb_bytes"`
	Fallbacks     int64  `json:"hugetlb_fallbacks"`
	Pool          bool   `json:"pool"` // the system has a 2 MiB hugetlb pool
	PoolTotal     uint64 `json:"pool_total"`
	PoolFree      uint64 `json:"pool_free"`
	PoolAvailable uint64 `json:"pool_available"` // free and not reserved by a mapping
}

func infoFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write JSON instead of text")
	return fs, asJSON
}

func runInfo(args []string, stdout, stderr io.Writer) int {
	fs, asJSON := infoFlags()
	if ok, code := parseFlags(fs, infoUsage, args, stdout, stderr); !ok {
		return code
	}
	r := gatherInfo()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "%s info: %v\n", programName, err)
			return exitFailed
		}
		return exitOK
	}
	writeInfo(stdout, r)
	return exitOK
}

// section runs f, turning a panic into an error entry, so that one broken
// part of the runtime does not hide the rest of the report.
func (r *InfoReport) section(name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: internal error: %v", name, p))
		}
	}()
	f()
}

func gatherInfo() *InfoReport {
	r := &InfoReport{
		Schema: InfoSchema, Version: version(), Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		Drivers: []DriverInfo{}, Devices: []DeviceInfo{},
		Memspaces: []MemspaceInfo{}, Allocators: []AllocatorInfo{},
	}
	r.section("drivers", func() {
		for _, s := range target.Plugins() {
			d := DriverInfo{Plugin: s.Plugin, Library: s.Library, Version: s.Version, Init: s.Init, Usable: s.Err == nil}
			if s.Err != nil {
				d.Error = s.Err.Error()
			}
			if de := (*target.DriverError)(nil); errors.As(s.Err, &de) {
				d.Advice = de.Advice
			}
			r.Drivers = append(r.Drivers, d)
		}
	})
	r.section("devices", func() {
		r.NumDevices = target.NumDevices()
		r.InitialDevice = target.InitialDevice()
		r.DefaultDevice = target.DefaultDevice()
		for _, d := range target.Devices() {
			in := d.Info()
			st := d.Registry().Stats()
			var why string
			if err := d.Open(); err != nil {
				why = err.Error()
			}
			r.Devices = append(r.Devices, DeviceInfo{
				Usable: why == "", Error: why,
				Number: d.ID, Plugin: d.Plugin(), Initial: d.IsHost(), Default: d.ID == r.DefaultDevice,
				Name: in.Name, Vendor: in.Vendor, MemoryBytes: in.Memory, Capability: in.Capability, NUMANode: in.NUMANode,
				Registry: RegistryInfo{
					Entries: st.Entries, LockedBytes: uint64(st.LockedBytes), ExternalBytes: uint64(st.ExternalBytes),
					RegisteredBytes: uint64(st.RegisteredBytes), Hits: st.Hits, Misses: st.Misses,
				},
				PinnedPool: poolInfo(d.ID),
			})
		}
	})
	r.section("memspaces", func() {
		for _, id := range memspace.All() {
			b := memspace.Describe(id)
			nodes := b.Nodes
			if nodes == nil {
				nodes = []int{}
			}
			r.Memspaces = append(r.Memspaces, MemspaceInfo{
				Handle: uint64(id), Name: id.String(), Kind: b.Kind, Memory: b.Memory, BackedBy: b.BackedBy.String(),
				Nodes: nodes, NodesWhy: b.NodesWhy,
			})
		}
	})
	r.section("numa", func() { r.NUMA = gatherNUMA() })
	r.section("allocators", func() {
		def := alloc.Default()
		for _, h := range predef.Handles() {
			a, ok := ompglue.Lookup(uintptr(h))
			if !ok {
				r.Errors = append(r.Errors, fmt.Sprintf("allocators: %s is not available", predef.Name(h)))
				continue
			}
			r.Allocators = append(r.Allocators, AllocatorInfo{
				Handle: uint64(h), Name: predef.Name(h), Memspace: a.Memspace().String(),
				Traits: a.Traits().String(), Default: a == def,
			})
		}
	})
	r.section("OMP_ALLOCATOR", func() { r.OMPAllocator = envAllocator() })
	r.section("memlock", func() {
		m := MemlockInfo{SoftBytes: -1, HardBytes: -1, Soft: "n/a", Hard: "n/a", VmLckBytes: -1, VmLck: "n/a"}
		if soft, hard, ok := memlockLimit(); ok {
			m.SoftBytes, m.HardBytes = soft, hard
			m.Soft, m.Hard = limitText(soft), limitText(hard)
		}
		m.CapIPCLock = capIPCLock()
		if v, ok := vmLck(); ok {
			m.VmLckBytes, m.VmLck = v, fmtBytes(v)
		}
		r.Memlock = m
	})
	r.section("pinned", func() {
		st := alloc.ReadPinnedStats()
		p := PinnedInfo{LimitBytes: uint64(st.Limit), UsedBytes: uint64(st.Used), Limit: "none", Env: os.Getenv(envvar.PinnedLimit)}
		if st.Limit > 0 {
			p.Limit = fmtBytes(int64(st.Limit))
		}
		p.Source, p.Warning = pinnedLimitSource(int64(st.Limit))
		p.HugePages = HugePagesInfo{Mode: st.HugePages.String(), Env: os.Getenv(envvar.HugePages),
			HugeTLBBytes: uint64(st.HugeTLB), Fallbacks: st.HugeTLBFallbacks}
		if pool, ok := numa.HugeTLBPoolNow(numa.HugeTLBPage); ok {
			h := &p.HugePages
			h.Pool, h.PoolTotal, h.PoolFree, h.PoolAvailable = true, pool.Total, pool.Free, pool.Available()
		}
		r.Pinned = p
	})
	return r
}

// ownPinnedPool returns the statistics of device dev's own pinned pool (not
// one bound to a memory space's nodes), if it exists.
func ownPinnedPool(dev int) (alloc.PinnedPoolStats, bool) {
	for _, p := range alloc.ReadPinnedStats().Pools {
		if p.Device == dev && p.Bound == nil {
			return p, true
		}
	}
	return alloc.PinnedPoolStats{}, false
}

// poolInfo reads device dev's pinned pool; info itself pins nothing, so
// the pool exists only if something in this process made it. Nodes are
// the pool's heaps' nodes, or, before it exists, those it will have.
func poolInfo(dev int) PoolInfo {
	p := PoolInfo{Nodes: []int{}, Heaps: []PoolHeapInfo{}}
	if d, err := device.Get(dev); err == nil {
		p.Nodes = append(p.Nodes, numa.System().PoolNodes(d.Info().NUMANode)...)
	}
	if st, ok := ownPinnedPool(dev); ok {
		p.Nodes = []int{}
		if len(st.Nodes) > 1 { // one heap: Node -1, the device's node
			for _, n := range st.Nodes {
				p.Nodes = append(p.Nodes, n.Node)
			}
		}
		p.FarAllocs = st.FarAllocs
		for _, n := range st.Nodes {
			p.Heaps = append(p.Heaps, PoolHeapInfo{Node: n.Node, LockedBytes: uint64(n.Locked), IdleBytes: uint64(n.Idle),
				Chunks: n.Chunks, Huge: n.Huge, FarAllocs: n.FarAllocs})
		}
	}
	return p
}

// poolLines describes a device's pinned pool below the devices table, only
// where it is split per node (one heap says nothing a reader needs).
func poolLines(d DeviceInfo) []string {
	p := d.PinnedPool
	if len(p.Nodes) == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("  device %d pinned pool: a heap per NUMA node %s (callers use their node's; another's only when it has no memory)",
		d.Number, numa.FormatList(p.Nodes))}
	if len(p.Heaps) == 0 {
		return append(out, "    not made yet (no pinned allocation in this process)")
	}
	for _, h := range p.Heaps {
		out = append(out, fmt.Sprintf("    node %d: %s locked, %s idle, %d chunks, %d huge, %d far allocs",
			h.Node, fmtBytes(int64(h.LockedBytes)), fmtBytes(int64(h.IdleBytes)), h.Chunks, h.Huge, h.FarAllocs))
	}
	return out
}

func limitText(v int64) string {
	if v < 0 {
		return "unlimited"
	}
	return fmtBytes(v)
}

// envAllocator says what OMP_ALLOCATOR asked for and what it gave. The
// runtime prints its own warning for a bad value (once, on stderr); the
// reason is repeated here so that --json carries it.
func envAllocator() EnvAllocator {
	v, set := envvar.Lookup(envvar.Allocator) // blank counts as unset, as in the runtime
	def := alloc.Default()
	e := EnvAllocator{
		Set: set, Value: v, Resolved: def.String(), Handle: uint64(ompglue.Handle(def)),
		Memspace: def.Memspace().String(), Traits: def.Traits().String(),
	}
	if !set || v == "" || ompglue.Handle(def) != uintptr(kmp.DefaultMemAlloc) {
		return e
	}
	// The default is omp_default_mem_alloc although the variable is set:
	// either it names that allocator, or it was rejected. Find out why.
	spec, err := traitenv.ParseEnv(v)
	switch {
	case err != nil:
		e.Warning = err.Error()
	case spec.Allocator != 0:
		if _, ok := ompglue.Lookup(uintptr(spec.Allocator)); !ok {
			e.Warning = fmt.Sprintf("%s=%q: allocator %s is not available", envvar.Allocator, v, predef.Name(spec.Allocator))
		}
	default:
		a, err := alloc.NewFromTraits(spec.Memspace, spec.Traits)
		if err != nil {
			e.Warning = fmt.Sprintf("%s=%q: %v", envvar.Allocator, v, err)
		} else {
			_ = a.Destroy()
		}
	}
	if e.Warning != "" {
		e.Warning += "; using omp_default_mem_alloc"
	}
	return e
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeInfo prints the report as aligned text.
func writeInfo(w io.Writer, r *InfoReport) {
	fmt.Fprintf(w, "%s %s, %s %s/%s, %d CPUs\n", programName, r.Version, r.Go, r.OS, r.Arch, r.CPUs)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	heading := func(s string) {
		tw.Flush()
		fmt.Fprintf(w, "\n%s\n", s)
	}

	heading("Drivers")
	fmt.Fprintln(tw, "  PLUGIN\tLIBRARY\tVERSION\tINIT")
	var notes []string
	for _, d := range r.Drivers {
		lib, init := d.Library, oneLine(dash(d.Init))
		if lib == "" {
			lib = "none"
		}
		if len(init) > 48 { // a long reason (every candidate tried) goes below the table
			notes = append(notes, fmt.Sprintf("  %s: %s", d.Plugin, init))
			init = "see below"
			if d.Library == "" {
				init = "not loaded, see below"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", d.Plugin, lib, dash(d.Version), init)
		if d.Advice != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", d.Plugin, d.Advice))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}

	accel := "no accelerators"
	if r.NumDevices > 0 {
		accel = fmt.Sprintf("%d accelerator(s)", r.NumDevices)
	}
	heading(fmt.Sprintf("Devices (%s; the host is the initial device %d; default device %d)",
		accel, r.InitialDevice, r.DefaultDevice))
	fmt.Fprintln(tw, "  #\tPLUGIN\tNAME\tVENDOR\tMEMORY\tCAPABILITY\tNUMA\tREGISTRY")
	for _, d := range r.Devices {
		num := fmt.Sprint(d.Number)
		var tags []string
		if d.Initial {
			tags = append(tags, "initial")
		}
		if d.Default {
			tags = append(tags, "default")
		}
		if len(tags) > 0 {
			num += " (" + strings.Join(tags, ", ") + ")"
		}
		numa := "-"
		if d.NUMANode >= 0 {
			numa = fmt.Sprint(d.NUMANode)
		}
		reg := fmt.Sprintf("%d entries, %s locked", d.Registry.Entries, fmtBytes(int64(d.Registry.LockedBytes)))
		if d.Registry.ExternalBytes > 0 {
			reg += ", " + fmtBytes(int64(d.Registry.ExternalBytes)) + " external"
		}
		if d.Registry.RegisteredBytes > 0 {
			reg += ", " + fmtBytes(int64(d.Registry.RegisteredBytes)) + " registered"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", num, d.Plugin, dash(d.Name), dash(d.Vendor),
			fmtBytes(int64(d.MemoryBytes)), dash(d.Capability), numa, reg)
	}
	tw.Flush()
	for _, d := range r.Devices {
		for _, l := range poolLines(d) {
			fmt.Fprintln(w, l)
		}
	}
	for _, d := range r.Devices {
		if !d.Usable {
			fmt.Fprintf(w, "  device %d cannot be used (it keeps its number; the others work): %s\n", d.Number, d.Error)
		}
	}

	tw.Flush()
	writeNUMA(w, r.NUMA)

	heading("Memory spaces")
	fmt.Fprintln(tw, "  HANDLE\tNAME\tKIND\tNODES\tBACKED BY")
	for _, m := range r.Memspaces {
		nodes := "-"
		if len(m.Nodes) > 0 {
			nodes = numa.FormatList(m.Nodes)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", m.Handle, m.Name, m.Kind, nodes, m.Memory)
	}

	heading("Predefined allocators")
	fmt.Fprintln(tw, "  HANDLE\tNAME\tMEMORY SPACE\tTRAITS (besides the defaults)")
	for _, a := range r.Allocators {
		name := a.Name
		if a.Default {
			name += " (default)"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", a.Handle, name, a.Memspace, a.Traits)
	}

	heading("OMP_ALLOCATOR")
	e := r.OMPAllocator
	if e.Set {
		fmt.Fprintf(tw, "  value\t%q\n", e.Value)
	} else {
		fmt.Fprintf(tw, "  value\t(not set)\n")
	}
	fmt.Fprintf(tw, "  default allocator\t%s (handle %d) on %s, traits: %s\n", e.Resolved, e.Handle, e.Memspace, e.Traits)
	if e.Warning != "" {
		fmt.Fprintf(tw, "  warning\t%s\n", e.Warning)
	}

	heading("Page locking")
	rl := fmt.Sprintf("soft %s, hard %s", r.Memlock.Soft, r.Memlock.Hard)
	if r.Memlock.CapIPCLock {
		rl += " (the process has CAP_IPC_LOCK: the limit does not bind)"
	}
	fmt.Fprintf(tw, "  RLIMIT_MEMLOCK\t%s\n", rl)
	fmt.Fprintf(tw, "  VmLck\t%s\n", r.Memlock.VmLck)
	fmt.Fprintf(tw, "  pinned-bytes limit\t%s, %s in use\n", r.Pinned.Limit, fmtBytes(int64(r.Pinned.UsedBytes)))
	fmt.Fprintf(tw, "  limit from\t%s\n", r.Pinned.Source)
	if r.Pinned.Warning != "" {
		fmt.Fprintf(tw, "  warning\t%s\n", r.Pinned.Warning)
	}
	fmt.Fprintf(tw, "  pinned huge pages\t%s\n", hugePagesLine(r.Pinned.HugePages))
	tw.Flush()

	if len(r.Errors) > 0 {
		fmt.Fprintln(w, "\nErrors")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// hugePagesLine: "hugetlb (OMPALLOC_HUGEPAGES=hugetlb): 8 MiB in hugetlb pages (not in VmLck), 0 fallbacks; 2 MiB pool: 16 pages, 12 free".
func hugePagesLine(h HugePagesInfo) string {
	var sb strings.Builder
	sb.WriteString(h.Mode)
	if h.Env != "" {
		fmt.Fprintf(&sb, " (%s=%s)", envvar.HugePages, h.Env)
	} else {
		fmt.Fprintf(&sb, " (default; %s=hugetlb asks for hugetlb pages, off for none)", envvar.HugePages)
	}
	if h.Mode == alloc.HugePagesTLB.String() || h.HugeTLBBytes > 0 || h.Fallbacks > 0 {
		fmt.Fprintf(&sb, ": %s in hugetlb pages (not in VmLck), %d fallbacks to normal pages", fmtBytes(int64(h.HugeTLBBytes)), h.Fallbacks)
	}
	if h.Pool {
		fmt.Fprintf(&sb, "; 2 MiB hugetlb pool: %d pages, %d free, %d available", h.PoolTotal, h.PoolFree, h.PoolAvailable)
	} else {
		sb.WriteString("; no 2 MiB hugetlb pool")
	}
	return sb.String()
}

// pinnedLimitSource says where the pinned-bytes limit max came from (the
// decision alloc made: internal/pinlimit, or OMPALLOC_PINNED_LIMIT), and
// warns when it is below one pinned chunk: then pinned blocks come from
// part of a single chunk, and any larger than what is left fail.
func pinnedLimitSource(max int64) (source, warning string) {
	def := pinlimit.Compute()
	v, _ := envvar.Lookup(envvar.PinnedLimit)
	_, bad := envsize.Parse(v)
	switch {
	case v != "" && bad == nil:
		source = fmt.Sprintf("%s=%s", envvar.PinnedLimit, v)
	case max == def.Bytes:
		source = fmt.Sprintf("default: %s (%s overrides)", def.Why(), envvar.PinnedLimit)
	default:
		source = "set by the program (alloc.SetPinnedLimit)"
	}
	if max > 0 && max < pinnedChunk {
		warning = fmt.Sprintf("the limit (%s) is below one pinned chunk (%s): pinned blocks share part of one chunk, and larger ones fail; ", pinlimit.Size(max), pinlimit.Size(pinnedChunk))
		if strings.HasPrefix(source, "default") {
			warning += def.Advice()
		} else {
			warning += "raise " + envvar.PinnedLimit
		}
	}
	return source, warning
}

// pinnedChunk is what a pinned heap locks at a time (internal/heap's chunk).
const pinnedChunk = 4 << 20
