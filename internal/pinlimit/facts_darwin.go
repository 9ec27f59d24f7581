package pinlimit

import "syscall"

// ramLimited: darwin has no cap of ours unless RLIMIT_MEMLOCK is finite.
const ramLimited = false

func facts() Default {
	d := Default{Memlock: -1}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(6 /* RLIMIT_MEMLOCK on darwin */, &rl); err == nil && rl.Cur < 1<<62 {
		d.Memlock, d.MemlockBinds = int64(rl.Cur), true
	}
	return d
}
