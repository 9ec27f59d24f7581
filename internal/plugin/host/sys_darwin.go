package host

import (
	"encoding/binary"
	"syscall"
)

const (
	libcName      = "/usr/lib/libSystem.B.dylib"
	rlimitMemlock = 6
	rlimInfinity  = 1<<63 - 1
)

// physicalMemory is the machine's RAM in bytes, 0 when unknown.
func physicalMemory() uint64 {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil || len(s) > 8 {
		return 0
	}
	// Sysctl returns the raw uint64 as a string, minus a trailing zero byte.
	var b [8]byte
	copy(b[:], s)
	return binary.LittleEndian.Uint64(b[:])
}
