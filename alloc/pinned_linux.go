package alloc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// defaultPinnedLimit is RLIMIT_MEMLOCK when it binds (finite, and the
// process lacks CAP_IPC_LOCK, which lets root ignore it), else half of
// physical memory.
func defaultPinnedLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl); err == nil && rl.Cur != ^uint64(0) && !hasCapIPCLock() {
		return int64(rl.Cur)
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		return int64(uint64(si.Totalram) * uint64(si.Unit) / 2)
	}
	return 0
}

func hasCapIPCLock() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<14) != 0 // CAP_IPC_LOCK
		}
	}
	return false
}
