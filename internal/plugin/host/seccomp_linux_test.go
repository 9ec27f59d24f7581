package host

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/procstatus"
)

const seccompChildEnv = "OMPALLOC_TEST_SECCOMP_CHILD"

// Issue 29, item 5: a process holding CAP_IPC_LOCK whose mlock a sandbox
// refuses (a seccomp filter returning EPERM, as systemd's
// SystemCallFilter= or a container's profile do) was told "the kernel found
// no memory to lock". The error now says the call was refused (EPERM) and
// what commonly refuses it. In a child: the filter cannot be removed.
func TestLockRefusedBySeccomp(t *testing.T) {
	if !procstatus.HasCapIPCLock() {
		t.Skip("needs CAP_IPC_LOCK: without it EPERM is RLIMIT_MEMLOCK's answer, not the sandbox's (the case of the issue)")
	}
	if _, _, ok := seccompNumbers(); !ok {
		t.Skipf("no mlock system call numbers for %s in this test", runtime.GOARCH)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockRefusedBySeccompChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	if strings.Contains(string(out), "--- SKIP: TestLockRefusedBySeccompChild") {
		// No filter could be installed (an emulator such as qemu-user
		// refuses seccomp, whose filter would see the host's calls).
		t.Skipf("the child could not install a seccomp filter:\n%s", out)
	}
	require.Contains(t, string(out), "--- PASS: TestLockRefusedBySeccompChild", "%s", out)
	t.Logf("%s", out)
}

func TestLockRefusedBySeccompChild(t *testing.T) {
	if os.Getenv(seccompChildEnv) == "" {
		t.Skip("run by TestLockRefusedBySeccomp")
	}
	d := hostDevice(t)
	p := mapPages(t, 1)
	if err := denyMlock(); err != nil {
		t.Skipf("cannot install a seccomp filter here: %v", err)
	}
	_, err := d.LockHost(p, pageSize)
	require.ErrorIs(t, err, syscall.EPERM)
	require.ErrorIs(t, err, errLockRefused)
	require.NotErrorIs(t, err, ErrLockLimit)
	msg := err.Error()
	t.Log(msg)
	for _, w := range []string{"refused (EPERM)", "CAP_IPC_LOCK true", "seccomp", "SystemCallFilter=", "@memlock", "container"} {
		require.Contains(t, msg, w)
	}
	require.NotContains(t, msg, "found no memory")
	require.NotContains(t, msg, "\n")
	require.Empty(t, d.locks, "nothing recorded for the refused lock")
}

// seccompNumbers returns the audit architecture and the numbers of mlock
// and mlock2 (their Linux system call tables), the mlock2 in the second.
func seccompNumbers() (arch uint32, mlock [2]uint32, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return 0xc000003e, [2]uint32{149, 325}, true // AUDIT_ARCH_X86_64
	case "arm64":
		return 0xc00000b7, [2]uint32{228, 284}, true // AUDIT_ARCH_AARCH64
	}
	return 0, [2]uint32{}, false
}

// denyMlock installs, on every thread of the process (TSYNC), a seccomp
// filter that answers mlock and mlock2 with EPERM and allows the rest:
// what `SystemCallFilter=~@memlock` or a container profile does.
func denyMlock() error {
	arch, nr, _ := seccompNumbers()
	type sockFilter struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	const (
		ldAbsW   = 0x20 // BPF_LD|BPF_W|BPF_ABS
		jeqK     = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
		retK     = 0x06 // BPF_RET|BPF_K
		retAllow = 0x7fff0000
		retErrno = 0x00050000 // SECCOMP_RET_ERRNO, the errno in the low bits
	)
	prog := []sockFilter{
		{ldAbsW, 0, 0, 4}, // seccomp_data.arch
		{jeqK, 0, 3, arch},
		{ldAbsW, 0, 0, 0}, // seccomp_data.nr
		{jeqK, 2, 0, nr[0]},
		{jeqK, 1, 0, nr[1]},
		{retK, 0, 0, retAllow},
		{retK, 0, 0, retErrno | uint32(syscall.EPERM)},
	}
	fprog := struct {
		n      uint16
		filter *sockFilter
	}{uint16(len(prog)), &prog[0]}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, 38 /* PR_SET_NO_NEW_PRIVS */, 1, 0, 0, 0, 0); e != 0 {
		return e
	}
	sysSeccomp := uintptr(317)
	if runtime.GOARCH == "arm64" {
		sysSeccomp = 277
	}
	if _, _, e := syscall.RawSyscall(sysSeccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 1 /* SECCOMP_FILTER_FLAG_TSYNC */, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	runtime.KeepAlive(prog)
	return nil
}
