// Command pair runs one allocation case of bench/icount for N operations,
// so that valgrind's cachegrind, run at two N, gives the instructions one
// operation costs: (I(N2)-I(N1))/(N2-N1), start-up and set-up dropping out.
// With -time it runs the case natively instead and prints the nanoseconds
// of CPU time one operation took (the least of -runs runs of N, on the
// thread's CPU clock where there is one: Linux), for the CPU-time figures
// beside the counts.
//
// With -time -ref LIB it also times glibc's malloc+free pair in this
// process: LIB is glibc_pair.c built as a shared object (gcc -O2
// -fno-builtin -shared -fPIC), loaded with purego (no cgo), whose
// glibc_pairs_ns times n pairs at the case's size (64 B for the *-64 cases,
// 4 MiB for default-4MiB) on the thread's CPU clock, inside C. Each run
// times the case for n operations and then the reference for n pairs, on
// the same locked thread, so that both sides of a run see the same machine
// state: on a shared VM a process's speed flips between phases lasting
// seconds and the vCPUs differ, which moves the ratio of two minima taken
// in separate processes by ±5%. It prints three lines: the case's least ns
// per operation, the reference's least ("glibc-64 5.91"), and the median
// of the per-run ratios, ours / glibc's ("default-64/glibc-64
// paired-median 2.610"). Short runs (run.sh uses n=20,000) and many of them
// give both sides the same chances of a quiet window. On systems without a
// thread CPU clock here (cputime_other.go) the Go side reads wall time.
//
// Usage: pair -case NAME -n N [-time -runs R [-ref LIB]] [-regions K]
//
// Cases (one operation each):
//
//	default-64    omp_alloc(64, omp_default_mem_alloc) + omp_free
//	align64-64    the same on an omp_init_allocator allocator with alignment 64
//	default-4MiB  omp_alloc(4 MiB, omp_default_mem_alloc) + omp_free
//	pinned-64MiB  64 MiB on an allocator with pinned=true (null_fb: a failed pin fails the run)
//	lock-hit      the host device's LockMem + UnlockMem (llvm_omp_target_lock_mem's engine) of a
//	              sub-range of one of K locked regions: a registry hit, no mlock
//
// Every case runs a warm-up of its own before the N operations, so that
// both runs of a count start from the same caches. The exit status is 1
// when an operation fails (a nil block), 2 for bad arguments (-ref without
// -time, with a case that has no glibc counterpart, or a library that does
// not load or lacks glibc_pairs_ns).
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/target"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// warm is the operations each case runs before the measured ones.
const warm = 1000

// run is the program: its output goes to stdout, its complaints to stderr,
// and it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("case", "default-64", "the case to run (see the package doc)")
	n := fs.Int("n", 100000, "operations to run")
	timed := fs.Bool("time", false, "time the operations natively and print ns per operation")
	runs := fs.Int("runs", 5, "with -time: runs of n operations; the least is printed")
	refPath := fs.String("ref", "", "with -time: a shared library exporting "+refSymbol+
		" (glibc_pair.c built with -shared -fPIC), timed for n pairs after each run of the case")
	regions := fs.Int("regions", 10000, "lock-hit: regions locked")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n < 1 || *runs < 1 || *regions < 1 {
		fmt.Fprintf(stderr, "pair: -n, -runs and -regions must be at least 1\n")
		return 2
	}
	var ref refFunc
	refCase, hasRef := references[*name]
	if *refPath != "" {
		if !*timed {
			fmt.Fprintf(stderr, "pair: -ref needs -time\n")
			return 2
		}
		if !hasRef {
			fmt.Fprintf(stderr, "pair: -ref: case %s has no glibc counterpart (only default-64, align64-64, default-4MiB have one)\n", *name)
			return 2
		}
		var err error
		if ref, err = loadRef(*refPath); err != nil {
			fmt.Fprintf(stderr, "pair: -ref %s: %v\n", *refPath, err)
			return 2
		}
	}
	// No collection runs while instructions are counted: when one starts,
	// and how much marking and how many write barriers it costs, depends on
	// the run's timing. lock-hit's set-up and tear-down (10,000 regions
	// locked and unlocked) made several, and its count moved by 20 million
	// instructions (40 per operation) between otherwise equal processes.
	gcPercent := debug.SetGCPercent(-1)
	if !*timed {
		// One P, whatever GOMAXPROCS says (run.sh sets it too, for the
		// runtime's start): a goroutine that moves to another P misses its
		// P's caches, and pinned-64MiB then gives its region back and pins
		// a new one (180 Go objects allocated in 100,000 pairs on 2 Ps).
		runtime.GOMAXPROCS(1)
	}
	c, err := newCase(*name, *regions)
	if err != nil {
		fmt.Fprintf(stderr, "pair: %v\n", err)
		return 2
	}
	defer c.done()
	runtime.LockOSThread()
	if err := c.op(warm); err != nil {
		fmt.Fprintf(stderr, "pair: %s: %v\n", *name, err)
		return 1
	}
	// The set-up's garbage is collected now, in one blocking collection.
	runtime.GC()
	if !*timed {
		if err := counted(c, *n); err != nil {
			fmt.Fprintf(stderr, "pair: %s: %v\n", *name, err)
			return 1
		}
		return 0
	}
	debug.SetGCPercent(gcPercent) // timed runs are long, and time what a user's program sees
	if ref == nil {
		best := time.Duration(1<<63 - 1)
		for range *runs {
			t0 := cpuNow()
			if err := c.op(*n); err != nil {
				fmt.Fprintf(stderr, "pair: %s: %v\n", *name, err)
				return 1
			}
			best = min(best, cpuNow()-t0)
		}
		fmt.Fprintf(stdout, "%s %.2f\n", *name, float64(best.Nanoseconds())/float64(*n))
		return 0
	}
	return sideBySide(stdout, stderr, *name, c, refCase, ref, *n, *runs)
}

// sideBySide times the case and glibc's pair in this process, on this
// (locked) thread, alternating: each run times n operations of the case,
// then n pairs of the reference at the case's size. Adjacent runs see the
// same machine state (on a shared VM a process's speed flips between
// phases lasting seconds, and the two vCPUs differ), so their ratio is
// steadier than that of two minima taken in separate processes. It prints
// the least ns per operation of each side and the median of the per-run
// ratios (ours / glibc's):
//
//	default-64 15.40
//	glibc-64 5.91
//	default-64/glibc-64 paired-median 2.61
func sideBySide(stdout, stderr io.Writer, name string, c *benchCase, refCase reference, ref refFunc, n, runs int) int {
	if ns := ref(refCase.size, warm); ns < 0 {
		fmt.Fprintf(stderr, "pair: %s(%d, %d) failed (%g): a malloc returned NULL\n", refSymbol, refCase.size, warm, ns)
		return 1
	}
	bestOurs, bestRef := math.Inf(1), math.Inf(1)
	ratios := make([]float64, 0, runs)
	for range runs {
		t0 := cpuNow()
		if err := c.op(n); err != nil {
			fmt.Fprintf(stderr, "pair: %s: %v\n", name, err)
			return 1
		}
		ours := float64((cpuNow() - t0).Nanoseconds()) / float64(n)
		theirs := ref(refCase.size, n)
		if theirs < 0 {
			fmt.Fprintf(stderr, "pair: %s(%d, %d) failed (%g): a malloc returned NULL\n", refSymbol, refCase.size, n, theirs)
			return 1
		}
		bestOurs, bestRef = min(bestOurs, ours), min(bestRef, theirs)
		if theirs > 0 {
			ratios = append(ratios, ours/theirs)
		}
	}
	fmt.Fprintf(stdout, "%s %.2f\n", name, bestOurs)
	fmt.Fprintf(stdout, "%s %.2f\n", refCase.name, bestRef)
	if len(ratios) == 0 {
		fmt.Fprintf(stderr, "pair: %s: glibc's runs read 0 ns each (a clock too coarse for -n %d): no ratio\n", name, n)
		return 1
	}
	fmt.Fprintf(stdout, "%s/%s paired-median %.3f\n", name, refCase.name, median(ratios))
	return 0
}

// benchCase is a case's operation loop and its clean-up.
type benchCase struct {
	op   func(n int) error
	done func()
}

// pairLoop returns the loop of omp_alloc+omp_free pairs. Not inlined: the
// Go compiler does not inline calls inside a closure cloned into the
// function a closure's maker is inlined into, so newCase's copies would
// call kmp.Alloc and kmp.Free as functions, where a caller's ordinary code
// inlines them (both are one call of the engine).
//
//go:noinline
func pairLoop(size uintptr, a kmp.AllocatorHandle) func(int) error {
	return func(n int) error {
		for range n {
			p := kmp.Alloc(size, a)
			if p == nil {
				return fmt.Errorf("omp_alloc(%d) returned nil", size)
			}
			kmp.Free(p, a)
		}
		return nil
	}
}

func newCase(name string, regions int) (*benchCase, error) {
	nothing := func() {}
	switch name {
	case "default-64":
		return &benchCase{pairLoop(64, kmp.DefaultMemAlloc), nothing}, nil
	case "default-4MiB":
		return &benchCase{pairLoop(4<<20, kmp.DefaultMemAlloc), nothing}, nil
	case "align64-64":
		a := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{{Key: kmp.AtkAlignment, Value: 64}})
		if a == kmp.NullAllocator {
			return nil, fmt.Errorf("omp_init_allocator(alignment=64) failed")
		}
		return &benchCase{pairLoop(64, a), func() { kmp.DestroyAllocator(a) }}, nil
	case "pinned-64MiB":
		a := kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{
			{Key: kmp.AtkPinned, Value: kmp.AtvTrue}, {Key: kmp.AtkFallback, Value: kmp.AtvNullFb}})
		if a == kmp.NullAllocator {
			return nil, fmt.Errorf("omp_init_allocator(pinned=true) failed")
		}
		return &benchCase{pairLoop(64<<20, a), func() { kmp.DestroyAllocator(a) }}, nil
	case "lock-hit":
		return lockCase(regions)
	}
	return nil, fmt.Errorf("unknown case %q (default-64, align64-64, default-4MiB, pinned-64MiB, lock-hit)", name)
}

// regionBytes is the size of each locked region of lock-hit; regions share
// pages, so 10,000 of them lock a few hundred KiB.
const regionBytes = 32

// lockCase locks regions ranges of 32 B on the host device and then, per
// operation, locks and unlocks 16 B inside one of them picked by xorshift32
// (the registry's hit: a reference more and less, no mlock), through the
// device's LockMem and UnlockMem as `ompalloc bench`'s lock_regions does.
func lockCase(regions int) (*benchCase, error) {
	d, err := target.Get(target.InitialDevice())
	if err != nil {
		return nil, fmt.Errorf("lock-hit: %w", err)
	}
	size := uintptr(regions) * regionBytes
	buf := uintptr(kmp.Alloc(size, kmp.DefaultMemAlloc))
	if buf == 0 {
		return nil, fmt.Errorf("lock-hit: cannot allocate %d bytes for the regions", size)
	}
	locked := 0
	done := func() {
		for i := range locked {
			_ = d.UnlockMem(buf + uintptr(i)*regionBytes)
		}
		kmp.Free(cmem.Ptr(buf), kmp.DefaultMemAlloc)
	}
	for ; locked < regions; locked++ {
		if _, err := d.LockMem(buf+uintptr(locked)*regionBytes, regionBytes); err != nil {
			done()
			return nil, fmt.Errorf("lock-hit: locking region %d of %d: %w", locked+1, regions, err)
		}
	}
	x := uint32(2463534242)
	op := func(n int) error {
		for range n {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			p := buf + uintptr(uint64(x)*uint64(regions)>>32)*regionBytes + 8
			if _, err := d.LockMem(p, 16); err != nil {
				return err
			}
			if err := d.UnlockMem(p); err != nil {
				return err
			}
		}
		return nil
	}
	return &benchCase{op, done}, nil
}

// counted runs the n operations that are counted, with the collector off.
// They must allocate no Go memory, so that the collector being off leaves
// none of their cost out: a change that made them allocate fails the count
// rather than read low.
func counted(c *benchCase, n int) error {
	before := goAllocs()
	if err := c.op(n); err != nil {
		return err
	}
	if k := goAllocs() - before; k != 0 {
		return fmt.Errorf("%d operations allocated %d Go objects: with the collector off their collection is not counted", n, k)
	}
	return nil
}

// goAllocs is the number of Go heap objects the process has allocated.
// ReadMemStats, not runtime/metrics, whose count leaves out what the P's
// caches have not flushed yet (ten 64 B objects read as none).
func goAllocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
