package pcpu

import (
	"runtime"
	"sync/atomic"
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

// barrierErr is the errno of the first membarrier call refused after
// registration (0: none). From then on Barrier stops the world instead.
var barrierErr atomic.Uintptr

// barrier issues the expedited barrier. The kernel can refuse it after
// registration: a seccomp filter installed after start (systemd's
// SystemCallFilter=, a self-sandboxing service, a container runtime's
// profile) makes it EPERM or ENOSYS at any later time. Then, and on every
// later call, it waits for a stop-the-world instead, which is at least as
// strong: the world stops only once every goroutine has left its pinned
// section (a pinned goroutine cannot be preempted), and each P stops
// through the runtime's own synchronisation, so every store a P made
// before it stopped is visible to the caller after; every load a P makes
// after the world restarts sees the caller's stores from before it.
// runtime.GC stops the world twice; Trim relies on the same grace period.
func barrier() {
	if barrierErr.Load() == 0 {
		_, e := membarrier(membarrierPrivateExpedited)
		if e == 0 {
			return
		}
		barrierErr.CompareAndSwap(0, uintptr(e))
	}
	stopTheWorld()
}

// stopTheWorld waits for a stop-the-world (see barrier).
func stopTheWorld() { runtime.GC() }

// barrierRefused returns the errno with which the kernel refused a barrier
// after registration, or nil.
func barrierRefused() error {
	if e := barrierErr.Load(); e != 0 {
		return syscall.Errno(e)
	}
	return nil
}
