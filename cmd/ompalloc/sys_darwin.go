package main

const (
	rlimitMemlock = 6 // RLIMIT_MEMLOCK on darwin
	rlimInfinity  = 1<<63 - 1
)

// vmLck is not available on darwin (no /proc).
func vmLck() (int64, bool) { return 0, false }

// capIPCLock: darwin has no capabilities; the limit binds.
func capIPCLock() bool { return false }
