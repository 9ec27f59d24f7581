package numa

import (
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

func rdtscpAux() uint32
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// Linux writes (node << 12) | cpu into each CPU's TSC_AUX register, which
// RDTSCP reads in user space without a system call: what the vDSO's getcpu
// reads too (arch/x86/include/asm/segment.h, vdso_encode_cpunode).
const (
	auxCPUBits = 12
	prGetTSC   = 25 // prctl PR_GET_TSC
	prTSCSegv  = 2  // PR_TSC_SIGSEGV: RDTSC and RDTSCP fault
)

var (
	fastOnce sync.Once
	fastOK   bool
)

// fastUsable reports whether RDTSCP is there, allowed, and says what
// getcpu(2) says on this kernel (checked on one locked thread: the
// register is the kernel's to set, a hypervisor may not pass it on).
func fastUsable() bool {
	fastOnce.Do(func() {
		if max, _, _, _ := cpuid(0x80000000, 0); max < 0x80000001 {
			return
		}
		if _, _, _, d := cpuid(0x80000001, 0); d&(1<<27) == 0 {
			return // no RDTSCP
		}
		var mode int32
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTSC, uintptr(unsafe.Pointer(&mode)), 0); e == 0 && mode == prTSCSegv {
			return
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range 8 {
			a := rdtscpAux()
			var cpu, node uint32
			if _, _, e := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); e != 0 {
				return
			}
			if b := rdtscpAux(); a != b {
				continue // moved to another CPU in between: ask again
			}
			fastOK = a&(1<<auxCPUBits-1) == cpu && a>>auxCPUBits == node
			return
		}
	})
	return fastOK
}

// FastNode returns the node of the CPU the calling thread runs on, read
// from the CPU itself (RDTSCP, a few nanoseconds) where the kernel sets it
// up; ok is false where it cannot be read so (use CurrentNode). Like
// CurrentNode, the answer holds for the instant it is read.
func FastNode() (node int, ok bool) {
	if !fastUsable() {
		return -1, false
	}
	return int(rdtscpAux() >> auxCPUBits), true
}
