package alloc

import "syscall"

// defaultPinnedLimit is RLIMIT_MEMLOCK when finite, else no limit.
func defaultPinnedLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(6 /* RLIMIT_MEMLOCK on darwin */, &rl); err == nil && rl.Cur < 1<<62 {
		return int64(rl.Cur)
	}
	return 0
}
