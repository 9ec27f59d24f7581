//go:build linux && (amd64 || arm64)

package numa

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// Flags of get_mempolicy(2), and the mode flags the kernel ORs into a mode.
const (
	mpolFNode     = 1 << 0
	mpolFAddr     = 1 << 1
	mpolModeFlags = 1<<15 | 1<<14 | 1<<13 // STATIC_NODES, RELATIVE_NODES, NUMA_BALANCING
	maskWords     = 16                    // 1024 nodes: more than any kernel's MAX_NUMNODES default
)

// mbind sets mode on [p, p+n). The raw system call: no libnuma, no cgo.
func mbind(p, n uintptr, mode Mode, nodes []int, flags uintptr) error {
	m := nodeMask(nodes)
	var e syscall.Errno
	if len(m) == 0 {
		_, _, e = syscall.Syscall6(sysMbind, p, n, uintptr(mode), 0, 0, flags)
	} else {
		// The pointer conversion stays inside the call, where the compiler
		// keeps m alive and in place; maxnode is one more than the bits
		// because the kernel counts one less than it is told.
		_, _, e = syscall.Syscall6(sysMbind, p, n, uintptr(mode), uintptr(unsafe.Pointer(&m[0])), uintptr(len(m))*64+1, flags)
	}
	if e != 0 {
		return e
	}
	return nil
}

// GetPolicy returns the policy of the mapping holding p
// (get_mempolicy(MPOL_F_ADDR)): its mode and nodes.
func GetPolicy(p uintptr) (Mode, []int, error) {
	var mode int32
	var m [maskWords]uint64
	_, _, e := syscall.Syscall6(sysGetMempolicy, uintptr(unsafe.Pointer(&mode)), uintptr(unsafe.Pointer(&m[0])),
		maskWords*64, p, mpolFAddr, 0)
	if e != 0 {
		return 0, nil, fmt.Errorf("ompalloc: numa: get_mempolicy %#x: %w", p, e)
	}
	return Mode(mode &^ mpolModeFlags), maskNodes(m[:]), nil
}

// PageNodes returns the node of each page holding one of addrs
// (move_pages(2) with no target: nothing moves), or -errno for a page that
// is not there (-ENOENT: never touched).
func PageNodes(addrs []uintptr) ([]int, error) {
	if len(addrs) == 0 {
		return nil, nil
	}
	status := make([]int32, len(addrs))
	_, _, e := syscall.Syscall6(sysMovePages, 0, uintptr(len(addrs)), uintptr(unsafe.Pointer(&addrs[0])), 0,
		uintptr(unsafe.Pointer(&status[0])), 0)
	if e != 0 {
		return nil, fmt.Errorf("ompalloc: numa: move_pages: %w", e)
	}
	out := make([]int, len(status))
	for i, s := range status {
		out[i] = int(s)
	}
	return out, nil
}

// CurrentNode returns the node of the CPU the calling thread runs on
// (getcpu(2)). A goroutine may move to another thread, and its thread to
// another CPU, right after: lock the OS thread for an answer that lasts.
func CurrentNode() (int, error) {
	var cpu, node uint32
	_, _, e := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0)
	if e != 0 {
		return -1, fmt.Errorf("ompalloc: numa: getcpu: %w", e)
	}
	return int(node), nil
}

var (
	supportedOnce sync.Once
	supported     bool
)

// Supported reports whether this system takes memory policies: Linux with
// the memory-policy calls (a kernel built without CONFIG_NUMA, and
// qemu-user, answer ENOSYS). Asked once. Without them every placement is
// the process's, as on a one-node machine.
func Supported() bool {
	supportedOnce.Do(func() {
		var mode int32
		_, _, e := syscall.Syscall6(sysGetMempolicy, uintptr(unsafe.Pointer(&mode)), 0, 0, 0, 0, 0)
		supported = e != syscall.ENOSYS
	})
	return supported
}
