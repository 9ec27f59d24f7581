//go:build linux || darwin

package main

import "syscall"

// memlockLimit returns RLIMIT_MEMLOCK; -1 stands for unlimited.
func memlockLimit() (soft, hard int64, ok bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(rlimitMemlock, &r); err != nil {
		return 0, 0, false
	}
	conv := func(v uint64) int64 {
		if v == rlimInfinity || v > 1<<62 {
			return -1
		}
		return int64(v)
	}
	return conv(r.Cur), conv(r.Max), true
}
