package host

import (
	"errors"
	"fmt"
	"syscall"
)

// lockLimitError is a failed mlock, explained by the limit that most often
// causes it.
type lockLimitError struct {
	err   error
	limit string
}

func (e *lockLimitError) Error() string {
	return fmt.Sprintf("%v: RLIMIT_MEMLOCK is %s (see ulimit -l)", e.err, e.limit)
}

func (e *lockLimitError) Unwrap() []error { return []error{e.err, ErrLockLimit} }

// lockError wraps a failed mlock: ENOMEM, EAGAIN and EPERM are the kernel's
// ways of saying the lock limit (or the memory it may lock) is exhausted.
func lockError(err error) error {
	if !errors.Is(err, syscall.ENOMEM) && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return &lockLimitError{err: err, limit: memlockLimit()}
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
