package pcpu

import (
	"runtime"
	"syscall"
)

// membarrier(2) commands (linux/membarrier.h).
const (
	membarrierQuery                    = 0
	membarrierPrivateExpedited         = 1 << 3
	membarrierRegisterPrivateExpedited = 1 << 4
)

func sysMembarrier() uintptr {
	switch runtime.GOARCH {
	case "amd64":
		return 324
	case "arm64", "riscv64", "loong64":
		return 283
	}
	return 0 // not wired up: no barrier, atomics instead
}

func membarrier(cmd uintptr) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall(sysMembarrier(), cmd, 0, 0)
	return r, e
}

// initBarrier registers the process for expedited private barriers (once;
// Linux 4.14+). A kernel or sandbox that refuses (seccomp, gVisor, old
// kernels, qemu-user without the call) leaves HasBarrier false.
func initBarrier() bool {
	if sysMembarrier() == 0 {
		return false
	}
	mask, e := membarrier(membarrierQuery)
	if e != 0 || mask&membarrierPrivateExpedited == 0 {
		return false
	}
	_, e = membarrier(membarrierRegisterPrivateExpedited)
	return e == 0
}

func barrier() {
	if _, e := membarrier(membarrierPrivateExpedited); e != 0 {
		// Registered at init, so the kernel cannot refuse now; if it ever
		// did, HasBarrier's users would lose their ordering: stop loudly.
		panic("pcpu: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after registration: " + e.Error())
	}
}
