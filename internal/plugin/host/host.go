package host

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Errors of the host device; test with errors.Is.
var (
	// ErrLockLimit: mlock refused to lock more memory (RLIMIT_MEMLOCK, or
	// no memory the kernel may lock).
	ErrLockLimit = errors.New("page-lock limit reached")
	// errLockRefused marks an mlock refused outright (EPERM) where no
	// limit explains it: a seccomp filter (systemd SystemCallFilter=, a
	// container's seccomp profile) or a security module denies the call.
	// Unexported (the public API is kept small, issue 28): callers test
	// errors.Is(err, syscall.EPERM), which the error also matches.
	errLockRefused = errors.New("mlock refused")
	// ErrUnmapped: part of the range to lock is not mapped.
	ErrUnmapped = errors.New("range not mapped")
	// ErrMapCount: the process has vm.max_map_count mappings, and locking
	// or unlocking the range would split one more.
	ErrMapCount = errors.New("vm.max_map_count reached")
	// ErrNotLocked: UnlockHost of an address LockHost never returned.
	ErrNotLocked = sentinel.ErrNotLocked
	// ErrNotAllocated: Free of an address Alloc never returned, or with
	// another kind than it was allocated with.
	ErrNotAllocated = errors.New("not allocated by the host device")
)

// New returns the host plugin. Its one device is created by Init.
func New() plugin.Plugin { return &hostPlugin{} }

type hostPlugin struct {
	mu  sync.Mutex
	dev *device
	err error
}

func (h *hostPlugin) Name() string { return "host" }

// Init binds libc. The host device exists even when that fails (its
// operations then return the reason), so the initial device is always there.
func (h *hostPlugin) Init() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dev == nil {
		h.dev = newDevice()
	}
	h.err = h.dev.libcErr
	return h.err
}

func (h *hostPlugin) Status() plugin.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := plugin.Status{Plugin: "host", Library: libcName, Init: "ok"}
	if h.err != nil {
		s.Init, s.Err, s.Library = h.err.Error(), h.err, ""
	}
	return s
}

func (h *hostPlugin) Devices() []plugin.Impl {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dev == nil {
		h.dev = newDevice()
	}
	return []plugin.Impl{h.dev}
}

// device is the host as a device. All its memory is host memory; its
// bookkeeping (locks, allocations) is under mu. None of it is on a hot path:
// the generic layer's registry answers repeated locks without calling here.
type device struct {
	libc    *dl.LibC
	libcErr error

	mu     sync.Mutex
	pages  pageCounts
	locks  map[uintptr][]uintptr // LockHost start → its sizes, most recent last
	allocs map[uintptr]allocation
}

type allocation struct {
	size uintptr // page-rounded
	kind plugin.MemKind
}

func newDevice() *device {
	d := &device{locks: map[uintptr][]uintptr{}, allocs: map[uintptr]allocation{}}
	d.libc, d.libcErr = dl.C()
	return d
}

var pageSize = uintptr(syscall.Getpagesize())

// pageSpan returns the page indices [first, end) covering [p, p+n).
func pageSpan(p, n uintptr) (first, end uintptr, err error) {
	if n == 0 || p+n < p {
		return 0, 0, fmt.Errorf("range %#x+%d: %w", p, n, sentinel.ErrInvalidArgument)
	}
	return p / pageSize, (p+n-1)/pageSize + 1, nil
}

func (d *device) Info() plugin.Info {
	return plugin.Info{Name: "host", Vendor: "host", Memory: physicalMemory(), NUMANode: -1}
}

// LockHost mlocks the pages of [p, p+n) that no other lock covers yet. The
// device address of host memory is the host address.
func (d *device) LockHost(p, n uintptr) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.lockLocked(p, n); err != nil {
		return 0, err
	}
	d.locks[p] = append(d.locks[p], n)
	return p, nil
}

// UnlockHost releases the most recent lock taken at p; pages another lock
// still covers stay locked.
func (d *device) UnlockHost(p uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	sizes := d.locks[p]
	if len(sizes) == 0 {
		return fmt.Errorf("munlock %#x: %w", p, ErrNotLocked)
	}
	n := sizes[len(sizes)-1]
	if err := d.unlockLocked(p, n); err != nil {
		return err
	}
	if len(sizes) == 1 {
		delete(d.locks, p)
	} else {
		d.locks[p] = sizes[:len(sizes)-1]
	}
	return nil
}

// ExternalLock: the host cannot tell which pages others mlocked, and it does
// not need to: mlock and munlock are not reference counted by the kernel, so
// there is no registration of someone else's to disturb except through
// munlock, which only touches pages this device locked itself.
func (d *device) ExternalLock(p, n uintptr) (pinreg.External, bool, error) {
	return pinreg.External{}, false, nil
}

// lockLocked counts [p, p+n) locked and mlocks the pages that were not. On
// failure every count and page is as before.
func (d *device) lockLocked(p, n uintptr) error {
	if d.libcErr != nil {
		return d.libcErr
	}
	first, end, err := pageSpan(p, n)
	if err != nil {
		return fmt.Errorf("mlock: %w", err)
	}
	runs := d.pages.add(first, end, +1, nil)
	for i, r := range runs {
		a, b := r.first*pageSize, r.end*pageSize
		if err := d.libc.Mlock(a, b-a); err != nil {
			// mlock stops at the failure with the pages before it locked
			// (over a hole, say): unlock this run as well as the earlier ones.
			for _, done := range runs[:i+1] {
				_ = d.munlockRun(done.first*pageSize, done.end*pageSize)
			}
			d.pages.add(first, end, -1, nil)
			return fmt.Errorf("lock %#x+%d: %w", p, n, lockError(err, a, b-a))
		}
	}
	return nil
}

// munlockRun unlocks [a, b). munlock, like mlock, stops at an unmapped page
// with the pages before it done: over a hole, each mapped piece is unlocked
// on its own (the unmapped ones hold no lock). Any other ENOMEM is the
// kernel refusing to split a mapping at vm.max_map_count: then what the
// failed call unlocked is locked again and the error wraps
// sentinel.ErrStillLocked.
func (d *device) munlockRun(a, b uintptr) error {
	err := d.libc.Munlock(a, b-a)
	if err == nil || !errors.Is(err, syscall.ENOMEM) {
		return err
	}
	if c := mapCause(err, a, b-a); errors.Is(c, ErrUnmapped) {
		return d.munlockMapped(a, b)
	} else if c != nil {
		err = c
	}
	_ = d.libc.Mlock(a, b-a) // merges back: needs no new mapping
	return fmt.Errorf("%w: %w", err, sentinel.ErrStillLocked)
}

// munlockMapped unlocks each mapped piece of [a, b), skipping the holes.
func (d *device) munlockMapped(a, b uintptr) error {
	var errs []error
	if _, _, ok := scanMapsEach(a, b, func(lo, hi uintptr) {
		errs = append(errs, d.libc.Munlock(lo, hi-lo))
	}); !ok {
		return fmt.Errorf("munlock %#x+%d: cannot read /proc/self/maps to skip its holes", a, b-a)
	}
	return errors.Join(errs...)
}

// unlockLocked uncounts [p, p+n) and munlocks the pages no lock covers any
// more.
func (d *device) unlockLocked(p, n uintptr) error {
	if d.libcErr != nil {
		return d.libcErr
	}
	first, end, err := pageSpan(p, n)
	if err != nil {
		return fmt.Errorf("munlock: %w", err)
	}
	runs := d.pages.add(first, end, -1, nil)
	var errs []error
	for i, r := range runs {
		err := d.munlockRun(r.first*pageSize, r.end*pageSize)
		if errors.Is(err, sentinel.ErrStillLocked) {
			// Nothing changes: lock again what the earlier runs unlocked and
			// count the range locked again, so that the unlock can be retried.
			for _, done := range runs[:i] {
				_ = d.libc.Mlock(done.first*pageSize, (done.end-done.first)*pageSize)
			}
			d.pages.add(first, end, +1, nil)
			return fmt.Errorf("unlock %#x+%d: %w", p, n, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Alloc maps n bytes (rounded up to pages). Device and shared memory of the
// host are plain host memory; host memory is also locked (host-pinned).
func (d *device) Alloc(kind plugin.MemKind, n uintptr) (uintptr, error) {
	if d.libcErr != nil {
		return 0, d.libcErr
	}
	switch kind {
	case plugin.MemDevice, plugin.MemHost, plugin.MemShared:
	default:
		return 0, opErr(sentinel.ErrInvalidArgument, "alloc of %s memory", kind)
	}
	if n == 0 || n > ^uintptr(0)-pageSize {
		return 0, opErr(sentinel.ErrInvalidArgument, "alloc of %d bytes of %s memory", n, kind)
	}
	size := (n + pageSize - 1) &^ (pageSize - 1)
	p, err := d.libc.Map(size)
	if err != nil {
		return 0, opErr(err, "alloc of %d bytes of %s memory", n, kind)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if kind == plugin.MemHost {
		if err := d.lockLocked(p, size); err != nil {
			_ = d.libc.Unmap(p, size)
			return 0, opErr(fmt.Errorf("pin: %w", err), "alloc of %d bytes of %s memory", n, kind)
		}
	}
	d.allocs[p] = allocation{size: size, kind: kind}
	return p, nil
}

// Free releases memory from Alloc of the same kind.
func (d *device) Free(kind plugin.MemKind, p uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.allocs[p]
	if !ok || a.kind != kind {
		return opErr(ErrNotAllocated, "free of %s memory at %#x", kind, p)
	}
	return d.freeLocked(p, a)
}

func (d *device) freeLocked(p uintptr, a allocation) error {
	var errUnlock error
	if a.kind == plugin.MemHost {
		errUnlock = d.unlockLocked(p, a.size)
	}
	delete(d.allocs, p)
	return errors.Join(errUnlock, d.libc.Unmap(p, a.size))
}

// Copy is a memmove whatever the direction; work on a host queue is done
// before Copy returns.
func (d *device) Copy(dst, src, n uintptr, dir plugin.Direction, q plugin.QueueImpl) error {
	if n == 0 {
		return nil
	}
	if dst == 0 || src == 0 {
		return opErr(sentinel.ErrInvalidArgument, "%s of %d bytes from %#x to %#x", dir, n, src, dst)
	}
	if err := cmem.CopyChecked(dst, src, n); err != nil { // a foreign range may fault
		return opErr(fmt.Errorf("%w: %w", sentinel.ErrInvalidArgument, err), "%s of %d bytes from %#x to %#x", dir, n, src, dst)
	}
	return nil
}

func (d *device) NewQueue() (plugin.QueueImpl, error) { return hostQueue{}, nil }

// Close releases every allocation and lock still held: the process is done
// with the device.
func (d *device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.libcErr != nil {
		return nil
	}
	var errs []error
	for p, a := range d.allocs {
		errs = append(errs, d.freeLocked(p, a))
	}
	for p, sizes := range d.locks {
		for _, n := range sizes {
			errs = append(errs, d.unlockLocked(p, n))
		}
		delete(d.locks, p)
	}
	return errors.Join(errs...)
}

// hostQueue runs everything at once.
type hostQueue struct{}

func (hostQueue) Synchronize() error   { return nil }
func (hostQueue) Query() (bool, error) { return true, nil }
func (hostQueue) Destroy() error       { return nil }

// opErr is the error of an operation on the host device: target names the
// device by its OpenMP number and the operation itself, and keeps only err
// (plugin.Cause); alone it reads "host: op: err".
func opErr(err error, format string, args ...any) error {
	return &plugin.OpError{Dev: "host", Op: fmt.Sprintf(format, args...), Err: err}
}
