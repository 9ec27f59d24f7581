package main

// The hot-path figures of issue 13: alloc+free from 1..16 goroutines at
// once, and the resident memory a block costs with many live.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/kmp"
)

var (
	fullGoroutines        = []int64{1, 2, 4, 8, 16}
	quickGoroutines       = []int64{1, 4, 16}
	fullBlockMemorySizes  = []int64{16, 64, 100, 1000, 1500, 3000, 4096}
	quickBlockMemorySizes = []int64{64, 4096} // a child process of up to 256 MiB each
)

// goroutinesSection: n goroutines each doing alloc+free of 64 B on
// omp_default_mem_alloc at once. The figure is the CPU time one pair costs:
// the process's CPU time (getrusage) over the pairs, which does not depend
// on how many CPUs a busy machine lets the run have. Flat from 1 to 16 means
// the per-goroutine cost does not grow with goroutines; past the CPU count
// the goroutines share CPUs, so those figures measure fairness and
// contention, not parallel speed (the title says so).
func goroutinesSection(c *benchConfig) *benchSection {
	s := &benchSection{}
	gs := quickGoroutines
	if c.full {
		gs = fullGoroutines
	}
	for _, g := range gs {
		s.cases = append(s.cases, &benchCase{group: "alloc_goroutines", series: "default-64", size: 64, goroutines: g,
			run: func(budget time.Duration) (float64, int, error) {
				a, ok := ompglue.Lookup(uintptr(kmp.DefaultMemAlloc))
				if !ok {
					return 0, 0, errors.New("omp_default_mem_alloc is not available")
				}
				var cpu time.Duration
				var pairs int
				_, n, err := measure(budget, func(n int) error {
					per := max(1, n/int(g))
					c0, ok := cpuTime()
					if !ok {
						return errors.New("the process's CPU time is not readable on this system")
					}
					var wg sync.WaitGroup
					errs := make([]error, g)
					for i := range g {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range per {
								p, err := a.Alloc(64)
								if err == nil {
									err = a.Free(p)
								}
								if err != nil {
									errs[i] = err
									return
								}
							}
						}()
					}
					wg.Wait()
					c1, _ := cpuTime()
					cpu, pairs = c1-c0, per*int(g) // the last round's, as measure reports
					return errors.Join(errs...)
				})
				if err != nil {
					return 0, 0, err
				}
				if cpu <= 0 {
					// Tick-sampled accounting (a kernel without precise CPU
					// time, as in a qemu guest) can miss a short round.
					return 0, 0, fmt.Errorf("the process's CPU time did not advance over %d pairs: this kernel accounts CPU time more coarsely than the round (raise --time)", pairs)
				}
				return float64(cpu) / float64(pairs), n, nil
			}})
	}
	return s
}

// blockMemorySection: the resident memory one block costs with many live
// (1,000,000, or fewer for big blocks so that all fit in 256 MiB), every
// byte written; the array of pointers is not counted. Series: ompalloc's
// default allocator and, for comparison in the same run, libc's malloc.
func blockMemorySection(c *benchConfig) *benchSection {
	s := &benchSection{}
	for _, series := range []string{"ompalloc", "libc malloc"} {
		for _, size := range c.pick(quickBlockMemorySizes, fullBlockMemorySizes) {
			s.cases = append(s.cases, &benchCase{group: "block_memory", series: series, size: size,
				perBlock: func() (float64, error) { return bytesPerBlockInChild(series, size, blockMemoryBudget(c)) }})
		}
	}
	return s
}

var (
	libcMallocOnce     sync.Once
	libcMalloc, libcFr uintptr
	libcTrim           uintptr // glibc's malloc_trim, 0 without
	libcMallocErr      error
)

func mallocFuncs() (malloc, free uintptr, err error) {
	libcMallocOnce.Do(func() {
		var l *dl.Library
		if l, libcMallocErr = dl.Open(dl.Spec{Name: "libc", Candidates: []string{"libc.so.6", "/usr/lib/libSystem.B.dylib"}}); libcMallocErr != nil {
			return
		}
		if libcMalloc, libcMallocErr = l.Sym("malloc"); libcMallocErr != nil {
			return
		}
		libcFr, libcMallocErr = l.Sym("free")
		libcTrim, _ = l.Sym("malloc_trim")
	})
	return libcMalloc, libcFr, libcMallocErr
}

// blockMemoryChild is the hidden command that measures one block_memory
// figure. Each runs in a process of its own: an allocator that keeps freed
// memory resident (glibc does, even after malloc_trim) would make every
// later figure of the same process too low.
const blockMemoryChild = "__block-memory"

// blockMemoryBudget is the bytes of live blocks a block_memory child
// allocates: 256 MiB (up to 1,000,000 blocks) at the default --time or
// more, less for a shorter --time (down to 16 MiB at 2.5 ms), so that the
// quick flags shorten this group too: it dominated a --time 1ms run.
func blockMemoryBudget(c *benchConfig) uintptr {
	const most, least = 256 << 20, 16 << 20
	if c.perCase >= quickPerCase {
		return most
	}
	return max(least, uintptr(float64(most)*float64(c.perCase)/float64(quickPerCase))) &^ (1<<20 - 1)
}

func bytesPerBlockInChild(series string, size int64, budget uintptr) (float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("cannot run the measuring child: %w", err)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(exe, blockMemoryChild, series, strconv.FormatInt(size, 10), strconv.FormatUint(uint64(budget), 10))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("measuring child: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if err != nil {
		return 0, fmt.Errorf("measuring child printed %q: %w", out.String(), err)
	}
	return v, nil
}

func runBlockMemoryChild(args []string, stdout, stderr io.Writer) int {
	if len(args) != 3 {
		fmt.Fprintf(stderr, "%s: %s SERIES SIZE BYTES\n", programName, blockMemoryChild)
		return exitUsage
	}
	budget, err := strconv.ParseUint(args[2], 10, 40)
	if err != nil || budget == 0 {
		fmt.Fprintf(stderr, "%s: %s: bad byte budget %q\n", programName, blockMemoryChild, args[2])
		return exitUsage
	}
	size, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil || size == 0 {
		fmt.Fprintf(stderr, "%s: %s: bad size %q\n", programName, blockMemoryChild, args[1])
		return exitUsage
	}
	v, err := bytesPerBlock(args[0], uintptr(size), uintptr(budget))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return 1
	}
	fmt.Fprintf(stdout, "%.3f\n", v)
	return exitOK
}

func bytesPerBlock(series string, size, budget uintptr) (float64, error) {
	n := max(1, min(1_000_000, int(budget/max(size, 1))))
	ps := make([]uintptr, n)
	for i := range ps { // the array is resident before the baseline
		ps[i] = 1
	}
	var allocate func() (uintptr, error)
	var release func(uintptr) error
	var trim func()
	switch series {
	case "ompalloc":
		a, ok := ompglue.Lookup(uintptr(kmp.DefaultMemAlloc))
		if !ok {
			return 0, errors.New("omp_default_mem_alloc is not available")
		}
		allocate = func() (uintptr, error) { p, err := a.Alloc(size); return uintptr(p), err }
		release = func(p uintptr) error { return a.Free(cmem.Ptr(p)) }
		trim = func() { alloc.Trim() }
	default:
		malloc, free, err := mallocFuncs()
		if err != nil {
			return 0, err
		}
		if libcTrim == 0 {
			// Without it freed memory stays resident, and the next size's
			// figure would be too low.
			return 0, errors.New("libc has no malloc_trim: the figure would count memory an earlier case left")
		}
		allocate = func() (uintptr, error) {
			if p := dlcall.Call(malloc, size); p != 0 {
				return p, nil
			}
			return 0, fmt.Errorf("malloc(%d) returned NULL", size)
		}
		release = func(p uintptr) error { dlcall.Call(free, p); return nil }
		trim = func() { dlcall.Call(libcTrim, 0) }
	}
	fill := func(ps []uintptr) ([]uintptr, error) {
		for i := range ps {
			var err error
			if ps[i], err = allocate(); err != nil {
				return ps[:i], err
			}
			b := cmem.Bytes(ps[i], size)
			for j := range b {
				b[j] = byte(j)
			}
		}
		return ps, nil
	}
	drain := func(ps []uintptr, err error) error {
		for _, p := range ps {
			if e := release(p); e != nil && err == nil {
				err = e
			}
		}
		trim()
		return err
	}
	// A warm-up round first: the code, the allocator's first metadata and
	// (under qemu-user) the translated code are resident before the
	// baseline, not counted as the blocks' (2.7 MiB of a 16 MiB run there).
	if err := drain(fill(make([]uintptr, min(n, 64)))); err != nil {
		return 0, err
	}
	debug.FreeOSMemory() // what earlier cases freed leaves the RSS before, not during
	before, ok := procstatus.VmRSSKiB()
	if !ok {
		return 0, errors.New("VmRSS is not readable on this system")
	}
	ps, err := fill(ps)
	debug.FreeOSMemory() // Go garbage the loop made (purego's calls) is not the blocks' cost
	after, _ := procstatus.VmRSSKiB()
	if err := drain(ps, err); err != nil {
		return 0, err
	}
	return float64(after-before) * 1024 / float64(len(ps)), nil
}
