package target

import (
	"fmt"
	"strings"

	"github.com/ompalloc/ompalloc/internal/procstatus"
)

// leaks is the end-of-run leak check of target's TestMain, before
// Shutdown (which would release everything): what the passing tests left
// on any device. internal/leakcheck checks the same of alloc's and kmp's
// runs, but imports target, so target's own tests cannot use it.
func leaks() []string {
	var msgs []string
	for _, d := range Devices() {
		if n := d.Registry().Stats().Entries; n != 0 {
			var sb strings.Builder
			d.Registry().r.Dump(&sb)
			msgs = append(msgs, fmt.Sprintf("device %d: %d registry entries still held:\n%s", d.ID, n, sb.String()))
		}
		if st := d.StagingStats(); st.InUseBytes != 0 {
			msgs = append(msgs, fmt.Sprintf("device %d: %d staging bytes still held by queues", d.ID, st.InUseBytes))
		}
		d.amu.Lock()
		allocs := len(d.allocs)
		d.amu.Unlock()
		if allocs != 0 {
			msgs = append(msgs, fmt.Sprintf("device %d: %d allocations Alloc returned and Free did not take back", d.ID, allocs))
		}
		if st := d.poolStats(); st.InUse != 0 {
			msgs = append(msgs, fmt.Sprintf("device %d: %d bytes of the device pool still handed out", d.ID, st.InUse))
		}
		d.qmu.Lock()
		queues := len(d.queues)
		d.qmu.Unlock()
		if queues != 0 {
			msgs = append(msgs, fmt.Sprintf("device %d: %d queues still open", d.ID, queues))
		}
	}
	return msgs
}

// vmLckLeak compares VmLck after Shutdown (which frees the staging pools'
// pinned buffers) with its value before the tests: the kernel's own count
// of what is still locked.
func vmLckLeak(before int, ok bool) []string {
	if after, aok := procstatus.VmLckKiB(); ok && aok && after != before {
		return []string{fmt.Sprintf("VmLck is %d kB after the tests and Shutdown, %d kB before", after, before)}
	}
	return nil
}
