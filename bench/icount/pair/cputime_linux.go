package main

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is CLOCK_THREAD_CPUTIME_ID (<linux/time.h>).
const clockThreadCPUTime = 3

// cpuNow returns the CPU time the calling thread has used (the caller
// holds its OS thread: run locks it). A case's time is measured in it, as
// glibc_pair measures its own, so that a run the scheduler interrupted on
// a shared machine is not charged for the time other processes ran.
func cpuNow() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return time.Duration(time.Now().UnixNano()) // not expected; wall time then
	}
	return time.Duration(ts.Nano())
}
