package pinlimit

import (
	"syscall"

	"github.com/ompalloc/ompalloc/internal/procstatus"
)

// ramLimited: with nothing else binding, Linux caps pinning at half of RAM.
const ramLimited = true

func facts() Default {
	d := Default{Memlock: -1}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl); err == nil && rl.Cur != ^uint64(0) {
		d.Memlock = int64(rl.Cur)
		d.MemlockBinds = !procstatus.HasCapIPCLock()
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		d.RAM = int64(uint64(si.Totalram) * uint64(si.Unit))
	}
	return d
}
