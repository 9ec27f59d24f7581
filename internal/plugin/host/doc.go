// Package host is the plugin of the host device: the initial device of
// OpenMP, always present, numbered after every accelerator.
//
// Its "device" memory is host memory, and locking means what it says: the
// page-rounded range is mlock'ed (LLVM's host plugin locks nothing). Two
// locked ranges may share a page, so locks are counted per page: a page is
// mlock'ed when its count goes from 0 to 1 and munlock'ed when it returns to
// 0, never earlier.
//
// A failing mlock leaves nothing locked (mlock stops at the failure with the
// pages before it locked; they are unlocked again), and its error names the
// cause the kernel's one ENOMEM hides: an unmapped hole (ErrUnmapped),
// vm.max_map_count reached (ErrMapCount: every separately locked range
// splits its mapping), RLIMIT_MEMLOCK with its value when it binds (no
// CAP_IPC_LOCK; ErrLockLimit), the call refused outright (EPERM that no
// limit explains: a seccomp filter such as systemd's SystemCallFilter= or a
// container's profile; the error matches syscall.EPERM), or no memory left to lock. A munlock the
// kernel refuses at vm.max_map_count leaves the range locked as before and
// counted, and wraps sentinel.ErrStillLocked, so the registry keeps its entry
// and the unlock can be retried.
//
// Copies in every direction are memmoves, and a queue of the host device
// runs its work at once: Query always reports done.
package host
