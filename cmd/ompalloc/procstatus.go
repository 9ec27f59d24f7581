package main

import "github.com/ompalloc/ompalloc/internal/procstatus"

// vmLck returns the memory this process has page-locked, in bytes (Linux).
func vmLck() (int64, bool) {
	kib, ok := procstatus.VmLckKiB()
	return int64(kib) << 10, ok
}

// capIPCLock reports whether the process may lock memory beyond
// RLIMIT_MEMLOCK.
func capIPCLock() bool { return procstatus.HasCapIPCLock() }
