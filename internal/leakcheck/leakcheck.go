package leakcheck

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/pinned"
	"github.com/ompalloc/ompalloc/target"
)

// Baseline is the process's state before the tests ran.
type Baseline struct {
	vmLckKiB   int
	hasVmLck   bool
	hugetlbKiB int
	hasHugetlb bool
}

// Start records the baseline. Call it before the first allocation.
func Start() Baseline {
	n, ok := VmLckKiB()
	h, hok := procstatus.HugetlbKiB()
	return Baseline{vmLckKiB: n, hasVmLck: ok, hugetlbKiB: h, hasHugetlb: hok}
}

// VmLckKiB reads VmLck from /proc/self/status (linux; ok false elsewhere).
func VmLckKiB() (kib int, ok bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmLck:" {
			n, err := strconv.Atoi(f[1])
			return n, err == nil
		}
	}
	return 0, false
}

// Consistent reports whether the kernel, the registries and the pinned heaps
// agree now, or nil: the bytes alloc.Pinned reports, the bytes counted
// under the pinned-bytes limit and the bytes the registries hold for pinned
// heaps (Registry.Hold) are equal, and VmLck is the baseline plus the pages
// of the host device's locked and registered entries (what it mlocked; pages
// two entries share count once) outside hugetlb pages, which VmLck never
// counts; those, alloc.ReadPinnedStats().HugeTLB, are what HugetlbPages rose by.
// Call it while no allocation, lock or unlock is in flight.
func (b Baseline) Consistent() error {
	var msgs []string
	ps := alloc.ReadPinnedStats()
	used := ps.Used
	var held, hostKiB uintptr
	for _, d := range target.Devices() {
		held += d.Registry().Stats().HeldBytes
		if d.IsHost() {
			hostKiB = lockedPages(d) * uintptr(os.Getpagesize()) / 1024
		}
	}
	if ps.Bytes != held || used != held {
		msgs = append(msgs, fmt.Sprintf("pinned heaps report %d bytes, the pinned-bytes limit counts %d, the registries hold %d for pinned heaps", ps.Bytes, used, held))
	}
	if b.hasVmLck {
		if n, ok := VmLckKiB(); ok && uintptr(n-b.vmLckKiB) != hostKiB {
			msgs = append(msgs, fmt.Sprintf("VmLck is %d kB above its %d kB baseline, the host device's registry holds %d kB of locked pages outside hugetlb pages", n-b.vmLckKiB, b.vmLckKiB, hostKiB))
		}
	}
	if b.hasHugetlb {
		if n, ok := procstatus.HugetlbKiB(); ok && uintptr(n-b.hugetlbKiB) != ps.HugeTLB>>10 {
			msgs = append(msgs, fmt.Sprintf("HugetlbPages is %d kB above its %d kB baseline, the pinned heaps report %d kB in hugetlb pages", n-b.hugetlbKiB, b.hugetlbKiB, ps.HugeTLB>>10))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("inconsistent: %s", strings.Join(msgs, "; "))
}

// lockedPages counts the pages covered by d's locked and registered
// entries outside hugetlb mappings (entries are in address order and never
// overlap, but two may share a page).
func lockedPages(d *target.Device) uintptr {
	pg := uintptr(os.Getpagesize())
	tlb := device.HugeTLBRanges()
	inTLB := func(p uintptr) bool {
		for _, r := range tlb {
			if r.Start <= p && p < r.Start+r.Size {
				return true
			}
		}
		return false
	}
	var pages, last uintptr // last: the end of the pages counted so far
	d.Registry().Each(func(e pinned.EntryInfo) bool {
		if e.Kind == pinned.KindExternal || inTLB(e.Host) {
			return true
		}
		lo, hi := e.Host/pg, (e.Host+e.Size+pg-1)/pg
		lo = max(lo, last)
		if hi > lo {
			pages += hi - lo
			last = hi
		}
		return true
	})
	return pages
}

// Check trims the pinned heaps and reports what is still held, or nil.
func (b Baseline) Check() error {
	alloc.Trim()
	var msgs []string
	live := alloc.LiveBlocks()
	for _, l := range live {
		d := ""
		if l.Destroyed {
			d = " (destroyed)"
		}
		msgs = append(msgs, fmt.Sprintf("%s%s: %d blocks (%d bytes) still allocated", l.Allocator, d, l.Blocks, l.Bytes))
	}
	if used := alloc.ReadPinnedStats().Used; used != 0 {
		msgs = append(msgs, fmt.Sprintf("%d pinned bytes still counted after a trim", used))
	}
	for _, d := range target.Devices() {
		if n := d.Registry().Stats().Entries; n != 0 {
			var sb strings.Builder
			d.Registry().Each(func(e pinned.EntryInfo) bool {
				fmt.Fprintf(&sb, "  [%#x, %#x) %v refs=%d mapped=%d\n", e.Host, e.Host+e.Size, e.Kind, e.Refs, e.MappedRefs)
				return true
			})
			msgs = append(msgs, fmt.Sprintf("device %d: %d registry entries still held:\n%s", d.ID, n, sb.String()))
		}
		if st := d.StagingStats(); st.InUseBytes != 0 {
			msgs = append(msgs, fmt.Sprintf("device %d: %d bytes of staging buffers still held by queues", d.ID, st.InUseBytes))
		}
	}
	if b.hasVmLck {
		if n, ok := VmLckKiB(); ok && n > b.vmLckKiB {
			msgs = append(msgs, fmt.Sprintf("VmLck is %d kB, %d kB when the tests started", n, b.vmLckKiB))
		}
	}
	if err := b.Consistent(); err != nil {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("leak check failed:\n")
	for _, m := range msgs {
		sb.WriteString("  " + m + "\n")
	}
	var stacks strings.Builder
	untraced := false // blocks allocated while leak-check mode was off
	for _, l := range live {
		for _, s := range l.Stacks {
			block, stack, _ := strings.Cut(s, "\n") // "0x..., 64 bytes", then the frames
			fmt.Fprintf(&stacks, "  %s from %s:\n%s", block, l.Allocator, stack)
		}
		untraced = untraced || int64(len(l.Stacks)) < l.Blocks
	}
	if stacks.Len() > 0 {
		sb.WriteString("where the leaked blocks were allocated:\n")
		sb.WriteString(stacks.String())
	}
	if untraced {
		fmt.Fprintf(&sb, "run again with %s=1 to see where the leaked blocks were allocated\n", envvar.LeakCheck)
	}
	return fmt.Errorf("%s", sb.String())
}

// Main runs the tests and then the leak check, and exits: 1 when a test
// failed or something leaked. The check is skipped when a test failed (a
// failed test may leave anything behind), in fuzz workers, and when one of
// the skipEnv variables is set (child processes started by tests, which
// may hold memory on purpose until they exit).
func Main(m *testing.M, skipEnv ...string) { os.Exit(Run(m, skipEnv...)) }

// Run is Main without the exit: it returns the exit code.
func Run(m *testing.M, skipEnv ...string) int {
	base := Start()
	code := m.Run()
	if code != 0 || skip(skipEnv) {
		return code
	}
	if err := base.Check(); err != nil {
		fmt.Fprint(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "FAIL: leaks after the tests passed")
		return 1
	}
	return 0
}

func skip(env []string) bool {
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return true
	}
	for _, e := range env {
		if os.Getenv(e) != "" {
			return true
		}
	}
	return false
}
