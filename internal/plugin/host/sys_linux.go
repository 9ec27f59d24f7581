package host

import "syscall"

const (
	libcName      = "libc.so.6"
	rlimitMemlock = 8
	rlimInfinity  = ^uint64(0)
)

// physicalMemory is the machine's RAM in bytes, 0 when unknown.
func physicalMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
