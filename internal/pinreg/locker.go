package pinreg

// Locker is what a registry asks of its device: page-lock and unlock host
// ranges, and tell whether a range was already locked outside this runtime.
// internal/plugin.Impl (every device plugin) satisfies it. Addresses are plain
// uintptrs: registered memory is C memory, or a Go object that target.Pin
// keeps reachable and in place (runtime.Pinner) while it is locked.
//
// A Registry calls its Locker only on misses and last unlocks, with its
// writer mutex held (so lock and unlock of the same pages never race), and
// never on hits or lookups. A Locker must not call back into the Registry.
// On a miss it asks ExternalLock first and calls LockHost only when that
// reports no external lock; the external range reported must contain the
// whole request, else the request is refused with ErrOverlap. UnlockHost is
// called exactly once per successful LockHost, with the same p.
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
