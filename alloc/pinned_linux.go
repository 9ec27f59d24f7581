package alloc

import (
	"syscall"

	"github.com/ompalloc/ompalloc/internal/procstatus"
)

// defaultPinnedLimit is RLIMIT_MEMLOCK when it binds (finite, and the
// process lacks CAP_IPC_LOCK, which lets root ignore it), else half of
// physical memory.
func defaultPinnedLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl); err == nil && rl.Cur != ^uint64(0) && !procstatus.HasCapIPCLock() {
		return int64(rl.Cur)
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		return int64(uint64(si.Totalram) * uint64(si.Unit) / 2)
	}
	return 0
}
