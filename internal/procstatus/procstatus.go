// Package procstatus reads fields of /proc/self/status on Linux: the
// locked (VmLck) and resident (VmRSS) memory that tests and `ompalloc info`
// report, and the effective capabilities. Elsewhere every field is absent.
package procstatus

import (
	"os"
	"strconv"
	"strings"
)

// Field returns the first number of the named field ("VmLck"), or false
// when the file or the field is absent.
func Field(name string) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(l, name+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		base := 10
		if name == "CapEff" {
			base = 16
		}
		n, err := strconv.ParseUint(f[0], base, 64)
		return n, err == nil
	}
	return 0, false
}

// VmLckKiB is the process's locked memory in KiB.
func VmLckKiB() (int, bool) { n, ok := Field("VmLck"); return int(n), ok }

// VmRSSKiB is the process's resident memory in KiB.
func VmRSSKiB() (int, bool) { n, ok := Field("VmRSS"); return int(n), ok }

// HasCapIPCLock reports whether the process may lock memory beyond
// RLIMIT_MEMLOCK (root usually may).
func HasCapIPCLock() bool {
	caps, ok := Field("CapEff")
	return ok && caps&(1<<14) != 0 // CAP_IPC_LOCK
}

// HugetlbKiB is the process's memory in hugetlb pages, in KiB (the
// HugetlbPages field, Linux 4.4 and later). VmLck never counts it, even
// where it is mlock'ed.
func HugetlbKiB() (int, bool) { n, ok := Field("HugetlbPages"); return int(n), ok }
