package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/regtab"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// MaxRegister is the most one cuMemHostRegister call registers: single
// registrations of 512 GiB and more are reported to fail, so larger ranges
// are registered in pieces of this size.
const MaxRegister = 64 << 30

// The driver's host registrations are the process's: cuMemHostRegister
// (PORTABLE) pins pages for every context and refuses a page registered
// already (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). So every device of the
// plugin locks through one table of them (internal/regtab, in Pages mode:
// whole pages, each registered once and shared by reference count among all
// devices and all ranges on it), which tells this file which pieces to
// register and unregister, outside its mutex; this file makes the calls.
//
// A registration's value is the device whose context registered it. The
// driver keeps a registration in the context that made it and drops it when
// that context is destroyed (the last cuDevicePrimaryCtxRelease resets the
// primary context). So each registration holds a reference of its own on
// its owner's primary context, from registering to its unregister: closing
// the owner while other devices still hold the range keeps it registered, in
// whatever order devices are closed.
type registrations = regtab.Table[*device, *device]

func newRegistrations() *registrations {
	return regtab.New[*device, *device](regtab.Config[*device]{
		MaxPiece:   MaxRegister,
		Unregister: unregister,
		NotLocked:  ErrNotLocked,
	})
}

// LockHost registers the pages of [p, p+n) with the driver (PORTABLE, so
// every context sees them) and returns the device address of p: only the
// pages no registration made here covers, for this device or another, for
// this range or another one sharing a page, are registered (see
// registrations).
func (d *device) LockHost(p, n uintptr) (uintptr, error) {
	if p == 0 || n == 0 || p+n < p {
		return 0, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, sentinel.ErrInvalidArgument)
	}
	dev, err := d.drv.regs.Lock(d, p, n, d.register, d.resolve)
	if err != nil {
		return 0, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
	}
	return dev, nil
}

// register registers s, whole pages, in d's context; the registration takes
// its own reference on d's primary context.
func (d *device) register(s regtab.Span) (*device, error) {
	var ctx uintptr
	if err := d.withCtx("cuDevicePrimaryCtxRetain", func() result {
		return call(d.drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(d.dev))
	}); err != nil {
		return nil, err
	}
	err := d.withCtx("cuMemHostRegister", func() result {
		return call(d.drv.cuMemHostRegister, s.Host, s.Size, cuMemHostRegisterPortable|cuMemHostRegisterDeviceMap)
	})
	if err != nil {
		_ = d.drv.check("cuDevicePrimaryCtxRelease", call(d.drv.cuDevicePrimaryCtxRelease, uintptr(d.dev)))
		if errors.Is(err, ErrAlreadyRegistered) {
			err = fmt.Errorf("pages [%#x, %#x) are registered outside ompalloc (cuMemHostRegister, cuMemHostAlloc): lock the whole registered range, or unregister it first: %w",
				s.Host, s.End(), err)
		}
		return nil, err
	}
	return d, nil
}

// resolve is the device address of p once the registrations all hold its
// pages: the device must see the range as one, every registration just made
// at the address the first implies (true under unified addressing).
func (d *device) resolve(p uintptr, _, made []regtab.Reg[*device]) (uintptr, error) {
	dev, err := d.devicePointer(p)
	if err != nil {
		return 0, err
	}
	for _, r := range made {
		at := max(r.Host, p)
		got, err := d.devicePointer(at)
		if err != nil {
			return 0, err
		}
		if got != dev+(at-p) {
			return 0, fmt.Errorf("pages at %#x map to device address %#x, not %#x: the device does not see the range as one", at, got, dev+(at-p))
		}
	}
	return dev, nil
}

// unregister unregisters r in its owner's context and then releases the
// registration's reference on that context. The owner may be closed: the
// reference kept its context alive. A failure keeps both (the table keeps
// the registration, to be reused or tried again).
func unregister(r regtab.Reg[*device]) error {
	o := r.Val
	if err := o.withOwnedCtx("cuMemHostUnregister", func() result { return call(o.drv.cuMemHostUnregister, r.Host) }); err != nil {
		return err
	}
	return o.drv.check("cuDevicePrimaryCtxRelease", call(o.drv.cuDevicePrimaryCtxRelease, uintptr(o.dev)))
}

// withOwnedCtx is withCtx for a registration's own work in its owner's
// context, which the registration holds a reference on: it runs also after
// the owner was closed.
func (d *device) withOwnedCtx(name string, f func() result) error {
	return d.inOpenCtx(func() error { return d.drv.check(name, f()) })
}

// devicePointer is the device's address for pinned host address p.
func (d *device) devicePointer(p uintptr) (uintptr, error) {
	var dev uintptr
	err := d.withCtx("cuMemHostGetDevicePointer", func() result {
		return call(d.drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dev)), p, 0)
	})
	return dev, err
}

// UnlockHost releases a lock this device took at p (its newest there); a
// registration goes when no lock holds it any more. A failed unregister
// keeps it in the driver and, unreferenced, in the table: the next lock of
// its pages reuses it, and Close tries again.
func (d *device) UnlockHost(p uintptr) error {
	if err := d.drv.regs.Unlock(d, p); err != nil {
		return fmt.Errorf("%v: %w", d, err)
	}
	return nil
}

// ExternalLock reports whether p lies in host memory pinned outside this
// package: registered by the user through the driver (cuMemHostRegister) or
// allocated pinned by it (cuMemHostAlloc). It asks the driver the memory type
// of p and, when it can, the whole range (RANGE_START_ADDR, RANGE_SIZE);
// otherwise [p, p+n) is reported. Ranges this package registered are not
// external: locking them again is shared and counted.
func (d *device) ExternalLock(p, n uintptr) (pinreg.External, bool, error) {
	if p == 0 || n == 0 {
		return pinreg.External{}, false, fmt.Errorf("%v: external lock query %#x+%d: %w", d, p, n, sentinel.ErrInvalidArgument)
	}
	var mt uint32
	var r result
	err := d.withCtx("cuPointerGetAttribute", func() result {
		r = call(d.drv.cuPointerGetAttribute, uintptr(unsafe.Pointer(&mt)), cuPointerAttributeMemoryType, p)
		if r == cudaErrorInvalidValue { // memory the driver does not know
			return cudaSuccess
		}
		return r
	})
	if err != nil {
		return pinreg.External{}, false, fmt.Errorf("%v: external lock query %#x: %w", d, p, err)
	}
	if r != cudaSuccess || mt != cuMemoryTypeHost {
		return pinreg.External{}, false, nil
	}
	start, size := p, n
	var s, z uintptr
	known := d.attr(&s, cuPointerAttributeRangeStartAddr, p) == nil && d.attr(&z, cuPointerAttributeRangeSize, p) == nil &&
		s <= p && z > 0 && p-s < z
	if known {
		start, size = s, z
	}
	// A range being registered or unregistered here is waited for: the
	// driver's answer is about our own registration, not recorded yet or on
	// its way out.
	ours := d.drv.regs.Holds(p, min(p, start), max(p+n, start+size))
	if ours {
		return pinreg.External{}, false, nil
	}
	dev, err := d.devicePointer(start)
	if err != nil {
		var dp uintptr
		if d.attr(&dp, cuPointerAttributeDevicePointer, start) != nil {
			return pinreg.External{}, false, fmt.Errorf("%v: external lock at %#x: %w", d, start, err)
		}
		dev = dp
	}
	return pinreg.External{Host: start, Dev: dev, Size: size}, true, nil
}

// attr reads a pointer attribute that is pointer-sized (an address or size).
func (d *device) attr(out *uintptr, attribute int, p uintptr) error {
	var v uintptr
	err := d.withCtx("cuPointerGetAttribute", func() result {
		return call(d.drv.cuPointerGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attribute), p)
	})
	*out = v
	return err
}
