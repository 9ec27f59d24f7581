package pinned

// Locker is what a registry asks of its device: page-lock and unlock host
// ranges, and tell whether a range was already locked outside this runtime.
// target.Impl (every device plugin) satisfies it. Addresses are plain
// uintptrs: registered memory is never Go heap memory.
type Locker interface {
	// LockHost page-locks [p, p+n) for the device and returns the address the
	// device uses for p.
	LockHost(p, n uintptr) (dev uintptr, err error)
	// UnlockHost releases a lock taken by LockHost at p.
	UnlockHost(p uintptr) error
	// ExternalLock reports whether [p, p+n) lies in memory locked outside
	// this runtime (for example cuMemHostRegister called by the user), and if
	// so that locked range and its device address.
	ExternalLock(p, n uintptr) (ext External, ok bool, err error)
}

// External describes a host range locked outside this runtime.
type External struct {
	Host, Dev, Size uintptr
}
