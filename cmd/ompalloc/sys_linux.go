package main

import (
	"os"
	"strconv"
	"strings"
)

const (
	rlimitMemlock = 8 // RLIMIT_MEMLOCK on linux/amd64 and linux/arm64
	rlimInfinity  = ^uint64(0)
)

// vmLck returns the VmLck line of /proc/self/status in bytes: the memory
// this process has page-locked.
func vmLck() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmLck:"); ok {
			f := strings.Fields(v) // "1234 kB"
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// capIPCLock reports whether the process holds CAP_IPC_LOCK, which lets it
// lock memory beyond RLIMIT_MEMLOCK.
func capIPCLock() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<14) != 0
		}
	}
	return false
}
