//go:build linux || darwin

package main

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used (user + system), and
// whether it could be read.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
