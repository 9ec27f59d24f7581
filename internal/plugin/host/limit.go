package host

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/ompalloc/ompalloc/internal/procstatus"
)

// lockLimitError is a failed mlock, explained by the limit that most often
// causes it.
type lockLimitError struct {
	err   error
	limit string
}

func (e *lockLimitError) Error() string {
	return fmt.Sprintf("%v: RLIMIT_MEMLOCK is %s: raise it with `ulimit -l`, `docker run --ulimit memlock=-1` or `LimitMEMLOCK=` in a systemd unit", e.err, e.limit)
}

func (e *lockLimitError) Unwrap() []error { return []error{e.err, ErrLockLimit} }

// causeError is a failed mlock or munlock with the cause found for it.
type causeError struct {
	err   error
	cause string
	kind  error // ErrUnmapped, ErrMapCount, ErrLockLimit
}

func (e *causeError) Error() string   { return fmt.Sprintf("%v: %s", e.err, e.cause) }
func (e *causeError) Unwrap() []error { return []error{e.err, e.kind} }

// lockError names the real cause of a failed mlock of [p, p+n). The kernel
// says ENOMEM for four different things, and the cure differs: part of the
// range is not mapped; the process reached vm.max_map_count (every
// separately locked range splits its mapping, so ~32k scattered locks
// exhaust 65530); RLIMIT_MEMLOCK, which binds only without CAP_IPC_LOCK; or
// no memory left to lock. EAGAIN is the limit's too, and so is EPERM
// without CAP_IPC_LOCK under a finite RLIMIT_MEMLOCK (a limit of 0). An
// EPERM no limit explains (CAP_IPC_LOCK held, or no finite limit) is the
// call refused: a seccomp filter returning EPERM for mlock (systemd's
// SystemCallFilter= without @memlock, a container's seccomp profile) or a
// security module; no memory is missing (errLockRefused).
func lockError(err error, p, n uintptr) error {
	if !errors.Is(err, syscall.ENOMEM) && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	if c := mapCause(err, p, n); c != nil {
		return c
	}
	capLock, finite := procstatus.HasCapIPCLock(), memlockFinite()
	if errors.Is(err, syscall.EPERM) && (capLock || !finite) {
		return &causeError{err: err, kind: errLockRefused,
			cause: fmt.Sprintf("mlock was refused (EPERM) though no limit explains it (CAP_IPC_LOCK %v, RLIMIT_MEMLOCK %s): a seccomp filter or security module denies the call, commonly systemd's SystemCallFilter= (allow @memlock) or a container's seccomp profile (allow mlock and mlock2)", capLock, memlockLimit())}
	}
	if !capLock && finite {
		return &lockLimitError{err: err, limit: memlockLimit()}
	}
	return &causeError{err: err, kind: ErrLockLimit,
		cause: fmt.Sprintf("the kernel found no memory to lock (RLIMIT_MEMLOCK, %s, does not bind: CAP_IPC_LOCK %v)", memlockLimit(), procstatus.HasCapIPCLock())}
}

// mapCause reports an unmapped hole in [p, p+n) or a map count at
// vm.max_map_count, or nil when neither explains an ENOMEM.
func mapCause(err error, p, n uintptr) error {
	if !errors.Is(err, syscall.ENOMEM) {
		return nil
	}
	count, hole, ok := scanMaps(p, p+n)
	if !ok {
		return nil
	}
	if hole != 0 {
		return &causeError{err: err, kind: ErrUnmapped,
			cause: fmt.Sprintf("[%#x, %#x) is not all mapped: nothing is mapped at %#x", p, p+n, hole)}
	}
	// A lock or unlock inside a mapping splits it in up to three.
	if max, ok := maxMapCount(); ok && count+2 >= max {
		return &causeError{err: err, kind: ErrMapCount,
			cause: fmt.Sprintf("vm.max_map_count (%d) reached: the process has %d mappings, and every separately locked range splits one; raise it with `sysctl -w vm.max_map_count=`", max, count)}
	}
	return nil
}

// memlockFinite reports whether the soft RLIMIT_MEMLOCK is finite.
func memlockFinite() bool {
	var r syscall.Rlimit
	return syscall.Getrlimit(rlimitMemlock, &r) != nil || r.Cur != rlimInfinity
}

// memlockLimit describes the soft RLIMIT_MEMLOCK.
func memlockLimit() string {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(rlimitMemlock, &r); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if r.Cur == rlimInfinity {
		return "unlimited"
	}
	return fmt.Sprintf("%d bytes", r.Cur)
}
