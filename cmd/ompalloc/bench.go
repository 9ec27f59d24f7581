package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ompalloc/ompalloc/target"
)

const benchUsageText = `

Measures, on this machine, what deciding whether to pin needs:
  alloc_free    alloc+free of one block per allocator (default, align64,
                pinned) and size (64 B .. 64 MiB), wall time per pair
  alloc_goroutines  alloc+free of 64 B in 1..16 goroutines at once: the CPU
                time per pair (flat means no cost that grows with goroutines)
  block_memory  resident bytes per block with up to 1,000,000 live (256 MiB;
                less with a --time under 40ms, down to 16 MiB), ompalloc and
                libc malloc, 16 B .. 4 KiB
  lock_size     lock+unlock of a fresh range against its size, through the
                host device (mlock) and, with a GPU, the GPU's driver
  lock_regions  with N ranges locked: lock+unlock of a contained sub-range
                (a registry hit) and a registry lookup
  partition_alloc_free  alloc+free of 64 B on allocators with partition
                environment, nearest, blocked, interleaved (mbind per chunk)
  pin_huge      map+mlock+munlock+unmap of 1 GiB (the largest --sizes when
                given) with 4 KiB pages, with MADV_HUGEPAGE first, and in
                2 MiB hugetlb pages where enough are free (never reserved)
  h2d, d2h      with a GPU: copy bandwidth against size (4 KiB .. 1 GiB) from
                pageable, pinned-allocated and registered host memory and,
                on CUDA, the driver's own peak (cuMemAllocHost memory,
                cuMemcpy*Async on a stream): the others show ours/peak
  small_copy    with a GPU: submit+synchronize latency of small copies on a
                queue, with and without the pinned staging pool
  device_alloc  with a GPU: alloc+free of 1 MiB of device memory through
                the device's pool (CUDA's stream-ordered allocator where the
                GPU has memory pools, else a size-class cache; JSON's
                device.device_pool says which) and through the driver
                (cuMemAlloc+cuMemFree)
Each case runs --repeat times (default 3), each run for about --time; the
figure is the median run, with the fastest and slowest beside it. The
default run measures every group at a few sizes, 40 ms per run: 4-7 s
without a GPU on an idle 2-core machine, 20 s on one under a load of 20.
--full measures every group at every power of 4 (transfers up to 1 GiB,
pin_huge 1 GiB), 200 ms per run: 35 s idle, 81 s under that load, more
with a GPU; the README's figures come from it. A table is printed at the end (JSON with --json),
then the transfer goals, met or missed; --svg also draws every group as a
chart, with error bars from the slowest to the fastest run. Progress goes
to stderr: a bar on a terminal, else one line per case (--quiet: none).
--groups h2d,d2h (any of the groups above) measures only those; with
--time 1ms --repeat 1 the whole run takes seconds (a figure per case, its
spread not known).

Flags:
`

// BenchSchema names the JSON layout of `ompalloc bench --json`.
const BenchSchema = "ompalloc-bench/1"

// BenchReport is `ompalloc bench --json`.
type BenchReport struct {
	Schema       string        `json:"schema"`
	Version      string        `json:"version"`
	Go           string        `json:"go"`
	OS           string        `json:"os"`
	Arch         string        `json:"arch"`
	CPUs         int           `json:"cpus"`
	Mode         string        `json:"mode"`             // "quick" (the default) or "full"
	TimePerCase  string        `json:"time_per_case"`    // one run of a case
	TimePerCaseN int64         `json:"time_per_case_ns"` // the same in ns
	RunsPerCase  int           `json:"runs_per_case"`
	Device       *BenchDevice  `json:"device"` // the device of the transfer groups; null without one
	Results      []BenchResult `json:"results"`
	Skipped      []BenchSkip   `json:"skipped"`
	Goals        []BenchGoal   `json:"goals"`
	ElapsedNs    int64         `json:"elapsed_ns"`
}

// BenchDevice is the accelerator measured.
type BenchDevice struct {
	Number int    `json:"number"`
	Plugin string `json:"plugin"`
	Name   string `json:"name"`
	// NUMANode is the device's node (-1: unknown). Every host buffer of the
	// transfer groups is placed there; HostNodes says where each series'
	// buffer really is (move_pages on a sample of its pages: a node list,
	// or why it is unknown), so a figure from a far node is told apart.
	NUMANode int `json:"numa_node"`
	// DevicePool is what served the device_alloc group's pool series:
	// "driver" (the driver's stream-ordered allocator: CUDA's
	// cuMemAllocFromPoolAsync/cuMemFreeAsync) or "size_class" (ompalloc's
	// cache of cuMemAlloc/HSA blocks); empty when not measured. Before
	// host_nodes, which gpu-check.sh reads as the object's last field.
	DevicePool string            `json:"device_pool,omitempty"`
	HostNodes  map[string]string `json:"host_nodes,omitempty"`
}

// BenchResult is one measured case.
type BenchResult struct {
	Group      string  `json:"group"`  // alloc_free, lock_size, lock_regions, h2d, d2h, small_copy, device_alloc
	Series     string  `json:"series"` // the line of the chart: "pinned", "pageable", ...
	SizeBytes  int64   `json:"size_bytes,omitempty"`
	Regions    int64   `json:"regions,omitempty"`
	Goroutines int64   `json:"goroutines,omitempty"` // alloc_goroutines: how many at once
	NsPerOp    float64 `json:"ns_per_op"`            // the median run's; 0 when Error is set
	NsMin      float64 `json:"ns_min,omitempty"`     // the fastest run's
	NsMax      float64 `json:"ns_max,omitempty"`     // the slowest run's
	Runs       int     `json:"runs"`                 // runs of the case (--repeat; block_memory: 1)
	GBPerS     float64 `json:"gb_per_s,omitempty"`   // h2d and d2h: 10^9 bytes per second, of the median run
	OfPeak     float64 `json:"of_peak,omitempty"`    // h2d and d2h: GBPerS over the driver peak's at this size, this run
	Iterations int     `json:"iterations"`           // operations timed, all runs together
	// block_memory: resident bytes per live block (NsPerOp is 0)
	BytesPerBlock float64 `json:"bytes_per_block,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// BenchSkip is a group that did not run, and why.
type BenchSkip struct {
	Group  string `json:"group"`
	Reason string `json:"reason"`
}

type benchConfig struct {
	asJSON   bool
	svg      string
	full     bool
	perCase  time.Duration // one run of a case; 0: the mode's default
	repeat   int
	quiet    bool
	sizes    []int64 // nil: each group's default
	regions  []int64
	device   int             // -1: the first accelerator
	groups   map[string]bool // --groups; nil: every group
	progress io.Writer
	lines    io.Writer // one line per case where progress has no terminal
}

// The time per run of a case, and runs per case, by default: the quick run
// takes 4-7 s on an idle 2-core machine (README), --full about 35 s.
const (
	quickPerCase = 40 * time.Millisecond
	fullPerCase  = 200 * time.Millisecond
	defaultRuns  = 3
)

// Default sizes and region counts: the quick run measures each group at a
// few points, --full at every power of 4.
var (
	fullAllocSizes  = powersOf4(64, 64<<20)
	quickAllocSizes = []int64{64, 4 << 10, 256 << 10, 64 << 20}
	fullGPUSizes    = powersOf4(4<<10, 1<<30)
	quickGPUSizes   = []int64{4 << 10, 1 << 20, 64 << 20}
	fullSmallSizes  = []int64{64, 1 << 10, 4 << 10, 16 << 10, 64 << 10}
	quickSmallSizes = []int64{64, 4 << 10, 64 << 10}
	defaultRegions  = []int64{100, 10_000, 100_000}
)

// pick returns --sizes when given, else the mode's default.
func (c *benchConfig) pick(quick, full []int64) []int64 {
	if c.sizes != nil {
		return c.sizes
	}
	if c.full {
		return full
	}
	return quick
}

func powersOf4(lo, hi int64) []int64 {
	var s []int64
	for v := lo; v <= hi; v *= 4 {
		s = append(s, v)
	}
	return s
}

// listFlag is a flag.Value for a comma-separated list.
type listFlag struct {
	v     *[]int64
	parse func(string) (int64, error)
	def   string
}

func (l listFlag) String() string {
	if l.v == nil || *l.v == nil {
		return l.def
	}
	parts := make([]string, len(*l.v))
	for i, x := range *l.v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func (l listFlag) Set(s string) error {
	v, err := parseList(s, l.parse)
	if err != nil {
		return err
	}
	*l.v = v
	return nil
}

func benchFlags() (*flag.FlagSet, *benchConfig) {
	c := &benchConfig{device: -1}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&c.asJSON, "json", false, "write JSON instead of the table")
	fs.StringVar(&c.svg, "svg", "", "also write a chart of the results to `FILE` (SVG)")
	fs.BoolVar(&c.full, "full", false, "the fuller run: every group at every power of 4, 200ms per run (minutes)")
	fs.DurationVar(&c.perCase, "time", 0, "measuring time per run of a case, a Go duration `D` like 10ms (default 40ms; 200ms with --full)")
	fs.IntVar(&c.repeat, "repeat", defaultRuns, "`N` runs per case: the median is the figure, the fastest and slowest its spread")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress on stderr")
	fs.Var(listFlag{&c.sizes, parseSize, ""}, "sizes",
		"block and copy sizes for every group, a comma-separated `LIST` like 64,4K,1M\n"+
			"(default: 64 B, 4 KiB, 256 KiB, 64 MiB; transfers 4 KiB, 1 MiB, 64 MiB; small copies 64 B, 4 KiB, 64 KiB;\n"+
			"with --full every power of 4: 64 B..64 MiB, transfers 4 KiB..1 GiB)")
	fs.Var(listFlag{&c.regions, parseCount, "100,10000,100000"}, "regions", "numbers of locked regions for lock_regions, a `LIST`")
	fs.IntVar(&c.device, "device", -1, "device `N` for the transfer groups (default: the first accelerator;\nthe host's number measures host memcpy)")
	fs.Var(groupsFlag{&c.groups}, "groups", "measure only these groups, a comma-separated `LIST` like h2d,d2h (default: every group)")
	return fs, c
}

// benchUsage is bench's help: its synopsis, generated from its flags, and
// the text.
var benchUsage = func() string {
	fs, _ := benchFlags()
	return "Usage: ompalloc bench " + synopsis(fs, len("Usage: ompalloc bench "), 78) + "\n" + benchUsageText
}()

func runBench(args []string, stdout, stderr io.Writer) int {
	fs, c := benchFlags()
	if ok, code := parseFlags(fs, benchUsage, args, stdout, stderr); !ok {
		return code
	}
	if c.perCase == 0 {
		c.perCase = quickPerCase
		if c.full {
			c.perCase = fullPerCase
		}
	}
	if c.perCase <= 0 || c.perCase > 10*time.Minute {
		fmt.Fprintf(stderr, "%s bench: --time %v: want a duration between 1ns and 10m\n\n", programName, c.perCase)
		printUsage(stderr, fs, benchUsage)
		return exitUsage
	}
	if c.repeat < 1 || c.repeat > 100 {
		fmt.Fprintf(stderr, "%s bench: --repeat %d: want 1 to 100 runs per case\n\n", programName, c.repeat)
		printUsage(stderr, fs, benchUsage)
		return exitUsage
	}
	if c.regions == nil {
		c.regions = defaultRegions
	}
	if c.device != -1 {
		if _, err := target.Get(c.device); err != nil {
			fmt.Fprintf(stderr, "%s bench: --device: %v\n\n", programName, err)
			printUsage(stderr, fs, benchUsage)
			return exitUsage
		}
	}
	switch {
	case c.quiet:
	case isTerminal(os.Stderr) && stderr == io.Writer(os.Stderr):
		c.progress = stderr
	default:
		// Redirected (a log, CI, gpu-check's bench.err): a line per case,
		// so a long run shows how far it got.
		c.lines = stderr
	}

	rep := runBenchmarks(c)

	if c.svg != "" {
		if err := writeSVGFile(c.svg, rep); err != nil {
			fmt.Fprintf(stderr, "%s bench: %v\n", programName, err)
			return exitFailed
		}
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "%s bench: %v\n", programName, err)
			return exitFailed
		}
	} else {
		writeBenchTable(stdout, rep)
		if c.svg != "" {
			fmt.Fprintf(stdout, "\nchart written to %s\n", c.svg)
		}
	}
	return exitOK
}

// isTerminal reports whether f is a character device (a terminal), without
// depending on x/term.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// benchCase is one measurement: a point of one series of one group.
type benchCase struct {
	group, series string
	size, regions int64
	goroutines    int64
	// run measures within the budget; it may do untimed preparation first.
	run func(budget time.Duration) (nsPerOp float64, iters int, err error)
	// perBlock, instead of run, measures memory (block_memory).
	perBlock func() (float64, error)
}

// benchSection is a group of cases sharing buffers: setup runs before its
// first case (an error fails every case of the section), teardown after
// its last.
type benchSection struct {
	cases    []*benchCase
	setup    func() error
	teardown func()
}

func runBenchmarks(c *benchConfig) *BenchReport {
	start := time.Now()
	rep := &BenchReport{
		Schema: BenchSchema, Version: version(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), TimePerCase: c.perCase.String(), TimePerCaseN: int64(c.perCase),
		RunsPerCase: max(c.repeat, 1), Mode: "quick", Results: []BenchResult{}, Skipped: []BenchSkip{},
	}
	if c.full {
		rep.Mode = "full"
	}
	sections := []*benchSection{allocSection(c), goroutinesSection(c), blockMemorySection(c), lockSizeSection(c), lockRegionsSection(c),
		partitionSection()}
	if c.wants("pin_huge") {
		pinHuge, skip := pinHugeSection(c)
		if skip != nil {
			rep.Skipped = append(rep.Skipped, *skip)
		}
		sections = append(sections, pinHuge)
	}
	if !c.wantsGPU() {
		// --groups without a transfer group: no device is looked for.
	} else if gpu, why := pickDevice(c); gpu != nil {
		in := gpu.Info()
		rep.Device = &BenchDevice{Number: gpu.ID, Plugin: gpu.Plugin(), Name: in.Name, NUMANode: in.NUMANode}
		sections = append(sections, transferSection(c, gpu, rep.Device), smallCopySection(c, gpu), deviceAllocSection(gpu, rep.Device))
	} else {
		for _, g := range gpuGroups {
			if c.wants(g) {
				rep.Skipped = append(rep.Skipped, BenchSkip{Group: g, Reason: why})
			}
		}
	}
	for i, s := range sections {
		sections[i] = c.keep(s)
	}

	total := 0
	for _, s := range sections {
		total += len(s.cases)
	}
	bar := newProgress(c.progress, total)
	bar.lines = c.lines
	for _, s := range sections {
		var setupErr error
		if s.setup != nil && len(s.cases) > 0 {
			setupErr = guard(s.setup)
		}
		for _, bc := range s.cases {
			bar.show(bc)
			caseStart := time.Now()
			res := runCase(c, bc, setupErr)
			rep.Results = append(rep.Results, res)
			bar.done(res, time.Since(caseStart))
		}
		if s.teardown != nil {
			_ = guard(func() error { s.teardown(); return nil })
		}
	}
	bar.finish()
	annotatePeak(rep)
	rep.Goals = benchGoals(rep)
	rep.ElapsedNs = int64(time.Since(start))
	return rep
}

// runCase runs one case --repeat times (block_memory once: a child
// process of up to 256 MiB each) and gives the median run's figure with
// the fastest and slowest beside it.
func runCase(c *benchConfig, bc *benchCase, setupErr error) BenchResult {
	res := BenchResult{Group: bc.group, Series: bc.series, SizeBytes: bc.size, Regions: bc.regions, Goroutines: bc.goroutines}
	err := setupErr
	if err == nil && bc.perBlock != nil {
		err = guard(func() error {
			var e error
			res.BytesPerBlock, e = bc.perBlock()
			return e
		})
		res.Runs = 1
	} else if err == nil {
		var runs []float64
		for range max(c.repeat, 1) {
			var ns float64
			var it int
			if err = guard(func() error {
				var e error
				ns, it, e = bc.run(c.perCase)
				return e
			}); err != nil {
				break
			}
			runs = append(runs, ns)
			res.Iterations += it
		}
		if err == nil {
			res.Runs = len(runs)
			res.NsPerOp, res.NsMin, res.NsMax = spread(runs)
		}
	}
	if err != nil {
		return BenchResult{Group: bc.group, Series: bc.series, SizeBytes: bc.size, Regions: bc.regions, Goroutines: bc.goroutines,
			Error: oneLine(err.Error())}
	}
	if (bc.group == "h2d" || bc.group == "d2h") && res.NsPerOp > 0 {
		res.GBPerS = float64(bc.size) / res.NsPerOp // bytes per ns = GB/s
	}
	return res
}

// spread returns the median, the least and the greatest of v (not empty);
// the median of an even count is the mean of the middle two.
func spread(v []float64) (median, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

// guard runs f, turning a panic into an error: one broken case must not
// stop the others.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return f()
}

// pickDevice chooses the device of the transfer groups: --device, else the
// first accelerator; nil and the reason when there is none.
func pickDevice(c *benchConfig) (*target.Device, string) {
	if c.device >= 0 {
		d, err := target.Get(c.device)
		if err != nil {
			return nil, err.Error()
		}
		return d, ""
	}
	if target.NumDevices() == 0 {
		return nil, fmt.Sprintf("no accelerator (the host is device %d; --device %d measures host memcpy)",
			target.InitialDevice(), target.InitialDevice())
	}
	d, err := target.Get(0)
	if err != nil {
		return nil, err.Error()
	}
	return d, ""
}

// progress draws a one-line bar on a terminal, or writes one line per
// finished case to lines; with neither it does nothing.
type progress struct {
	w            io.Writer
	lines        io.Writer
	total, ndone int
	start        time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, start: time.Now()}
}

func (p *progress) show(bc *benchCase) {
	if p.w == nil || p.total == 0 {
		return
	}
	const width = 24
	fill := p.ndone * width / p.total
	what := caseName(bc.group, bc.series, bc.size, bc.regions, bc.goroutines)
	line := fmt.Sprintf("[%s%s] %d/%d %s", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.ndone, p.total, what)
	if len(line) > 78 {
		line = line[:78]
	}
	fmt.Fprintf(p.w, "\r%-78s", line)
}

// caseName is how progress names a case: "alloc_free pinned 4 KiB".
func caseName(group, series string, size, regions, goroutines int64) string {
	what := group + " " + series
	if goroutines > 0 {
		what += fmt.Sprintf(" %d goroutines", goroutines)
	} else if size > 0 {
		what += " " + fmtBytes(size)
	}
	if regions > 0 {
		what += fmt.Sprintf(" %d regions", regions)
	}
	return what
}

func (p *progress) done(r BenchResult, took time.Duration) {
	p.ndone++
	if p.lines == nil {
		return
	}
	fmt.Fprintf(p.lines, "bench: [%d/%d] %s: %s (%.1fs; %.0fs in all)\n", p.ndone, p.total,
		caseName(r.Group, r.Series, r.SizeBytes, r.Regions, r.Goroutines), cellText(r), took.Seconds(), time.Since(p.start).Seconds())
}

func (p *progress) finish() {
	if p.w == nil || p.total == 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%-78s\r", "")
}
