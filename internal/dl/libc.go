//go:build linux || darwin

package dl

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"github.com/ebitengine/purego"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/fault"
)

// LibC holds the few libc functions the runtime calls through purego. They
// are called per chunk (megabytes), never per allocation.
type LibC struct {
	mmap, munmap, madvise, mlock, munlock, errno uintptr
}

var (
	libcOnce sync.Once
	libc     *LibC
	libcErr  error
)

// C returns the process's libc, bound once. It is present on every supported
// platform; an error here means the platform is not supported.
func C() (*LibC, error) {
	libcOnce.Do(func() { libc, libcErr = openLibC() })
	return libc, libcErr
}

func openLibC() (*LibC, error) {
	h, err := dlopen(libcPath)
	if err != nil {
		return nil, err
	}
	c := &LibC{}
	for _, s := range []struct {
		p    *uintptr
		name string
	}{
		{&c.mmap, "mmap"}, {&c.munmap, "munmap"}, {&c.madvise, "madvise"},
		{&c.mlock, "mlock"}, {&c.munlock, "munlock"}, {&c.errno, errnoSymbol},
	} {
		if *s.p = dlsym(h, s.name); *s.p == 0 {
			return nil, fmt.Errorf("%s in %s: %w", s.name, libcPath, ErrSymbolMissing)
		}
	}
	return c, nil
}

// call runs fn on a locked OS thread and returns its result and errno when
// the result reports failure (failed(r) true).
func (c *LibC) call(failed func(uintptr) bool, fn uintptr, args ...uintptr) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, _, _ := purego.SyscallN(fn, args...)
	if !failed(r) {
		return r, nil
	}
	ep, _, _ := purego.SyscallN(c.errno)
	e := *(*int32)(cmem.Ptr(ep))
	return r, syscall.Errno(e)
}

var mapFailed = ^uintptr(0)

func isMapFailed(r uintptr) bool { return r == mapFailed }
func isNonZero(r uintptr) bool   { return int32(r) != 0 }

// Map returns n bytes of fresh, zeroed, private anonymous memory.
func (c *LibC) Map(n uintptr) (uintptr, error) {
	r, err := c.call(isMapFailed, c.mmap, 0, n,
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON, ^uintptr(0), 0)
	if err != nil {
		return 0, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	return r, nil
}

// MapAligned returns n bytes aligned to align (a power of two), trimming
// the slack of an oversized mapping. A trim can fail where the mapping
// cannot be split (munmap's ENOMEM at vm.max_map_count): then the whole
// mapping is unmapped (one whole mapping needs no split) and the error
// returned, so a refused request leaves nothing mapped.
func (c *LibC) MapAligned(n, align uintptr) (uintptr, error) {
	if align <= pageSize {
		return c.Map(n)
	}
	p, err := c.Map(n + align)
	if err != nil {
		return 0, err
	}
	if mappedHook != nil {
		mappedHook(p, n+align)
	}
	end := p + n + align
	a := (p + align - 1) &^ (align - 1)
	if head := a - p; head > 0 {
		if err := c.trim(p, head); err != nil {
			return 0, c.undoMap(p, end, err)
		}
	}
	if tail := end - (a + n); tail > 0 {
		if err := c.trim(a+n, tail); err != nil {
			return 0, c.undoMap(a, end, err)
		}
	}
	return a, nil
}

// mappedHook and unmappedHook, set by tests only, see every oversized
// mapping MapAligned makes and every range of it MapAligned unmaps.
var mappedHook, unmappedHook func(p, n uintptr)

// unmapOwn unmaps [p, p+n) of a mapping MapAligned made.
func (c *LibC) unmapOwn(p, n uintptr) error {
	if err := c.Unmap(p, n); err != nil {
		return err
	}
	if unmappedHook != nil {
		unmappedHook(p, n)
	}
	return nil
}

// trim unmaps the slack [p, p+n) of a mapping MapAligned made.
func (c *LibC) trim(p, n uintptr) error {
	if err := fault.Check(fault.MapTrim); err != nil {
		return fmt.Errorf("munmap %#x+%d: %w", p, n, err)
	}
	return c.unmapOwn(p, n)
}

// undoMap unmaps what is left, [p, end), of a mapping whose trim failed
// with err.
func (c *LibC) undoMap(p, end uintptr, err error) error {
	if runtime.GOOS == "linux" && errors.Is(err, syscall.ENOMEM) {
		// munmap(2): ENOMEM only where the split would pass the process's
		// limit on mappings. Say which limit and how to raise it; reading
		// its value would need memory a new mapping may have to provide.
		err = fmt.Errorf("%w: vm.max_map_count reached (the trim would split a mapping); raise it with `sysctl -w vm.max_map_count=`", err)
	}
	if uerr := c.unmapOwn(p, end-p); uerr != nil {
		return fmt.Errorf("aligning a %d-byte mapping: %w; undoing it: %w", end-p, err, uerr)
	}
	return fmt.Errorf("aligning a mapping (unmapped again): %w", err)
}

// Unmap releases [p, p+n).
func (c *LibC) Unmap(p, n uintptr) error {
	if _, err := c.call(isNonZero, c.munmap, p, n); err != nil {
		return fmt.Errorf("munmap %#x+%d: %w", p, n, err)
	}
	return nil
}

// DontNeed tells the kernel the pages of [p, p+n) may be dropped; they read
// back as zeroes.
func (c *LibC) DontNeed(p, n uintptr) error {
	if _, err := c.call(isNonZero, c.madvise, p, n, madvDontNeed); err != nil {
		return fmt.Errorf("madvise %#x+%d: %w", p, n, err)
	}
	return nil
}

// Mlock page-locks [p, p+n).
func (c *LibC) Mlock(p, n uintptr) error {
	if _, err := c.call(isNonZero, c.mlock, p, n); err != nil {
		return fmt.Errorf("mlock %#x+%d: %w", p, n, err)
	}
	return nil
}

// Munlock unlocks [p, p+n).
func (c *LibC) Munlock(p, n uintptr) error {
	if _, err := c.call(isNonZero, c.munlock, p, n); err != nil {
		return fmt.Errorf("munlock %#x+%d: %w", p, n, err)
	}
	return nil
}

// pageSize is the OS page size.
var pageSize = uintptr(syscall.Getpagesize())
