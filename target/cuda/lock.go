package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/inflight"
	"github.com/ompalloc/ompalloc/pinned"
)

// MaxRegister is the most one cuMemHostRegister call registers: single
// registrations of 512 GiB and more are reported to fail, so larger ranges
// are registered in pieces of this size.
const MaxRegister = 64 << 30

// piece is one cuMemHostRegister call's range.
type piece struct{ host, size uintptr }

// split cuts [p, p+n) into consecutive pieces of at most max bytes.
func split(p, n, max uintptr) []piece {
	if n == 0 || max == 0 {
		return nil
	}
	out := make([]piece, 0, (n+max-1)/max)
	for n > 0 {
		s := min(n, max)
		out = append(out, piece{p, s})
		p, n = p+s, n-s
	}
	return out
}

// registration is one host range registered with the driver by this
// package, shared by every device that locked it or a part of it.
//
// The driver keeps a registration in the context that made it and drops it
// when that context is destroyed (the last cuDevicePrimaryCtxRelease resets
// the primary context). So the registration holds a reference of its own on
// its owner's primary context, from registering to the last unregister:
// closing the owner while other devices still hold the range keeps it
// registered, in whatever order devices are closed.
type registration struct {
	host, size uintptr
	pieces     []piece
	refs       int     // outstanding LockHost calls over every device
	owner      *device // whose context registered it, retained until unregistered
}

func (r *registration) contains(p, n uintptr) bool {
	return p >= r.host && n <= r.size && p-r.host <= r.size-n
}

// holdKey is a device's lock at an address: UnlockHost(p) on that device
// releases it.
type holdKey struct {
	d *device
	p uintptr
}

type hold struct {
	reg   *registration
	count int
}

// registrations are the driver's process-wide host registrations made here.
//
// The mutex covers the books, never a cuMemHostRegister or
// cuMemHostUnregister: registering a GiB range takes up to seconds and
// unregistering synchronizes with the device, and a lock of one range must
// not wait for either on another range. A range being registered or
// unregistered is in flight: a lock overlapping it waits for it to be
// done and looks again, so two lockers of overlapping ranges never both
// register, and none uses a registration on its way out.
type registrations struct {
	mu      sync.Mutex
	byPiece map[uintptr]*registration // every piece's start
	holds   map[holdKey]*hold
	flights inflight.Table          // ranges being registered or unregistered without mu
	spans   map[uintptr]uintptr     // byPiece's pieces: start → size (a registration's pieces change outside mu)
	sorted  atomic.Pointer[[]piece] // spans by address, for copies (split.go)
}

func (rs *registrations) init() {
	rs.byPiece = map[uintptr]*registration{}
	rs.spans = map[uintptr]uintptr{}
	rs.holds = map[holdKey]*hold{}
}

// ownerLocked returns the registration made here that holds [p, p+n), if
// any. Registrations never overlap (the driver refuses), so it is the one
// holding p: found by p itself or by the piece start the driver reported for
// p (start, when known), and only when the driver could not say, by a scan.
func (rs *registrations) ownerLocked(p, n, start uintptr, known bool) *registration {
	for _, s := range [2]uintptr{p, start} {
		if r := rs.byPiece[s]; r != nil && r.contains(p, n) {
			return r
		}
	}
	if known {
		return nil
	}
	for _, r := range rs.byPiece {
		if r.contains(p, n) {
			return r
		}
	}
	return nil
}

// LockHost registers [p, p+n) with the driver (PORTABLE, so every context
// sees it) in pieces of at most MaxRegister bytes and returns the device
// address of p. A range this package registered already, for this device or
// another, is shared and counted instead of registered again. The driver is
// asked to register without rs.mu held (see registrations).
func (d *device) LockHost(p, n uintptr) (uintptr, error) {
	if p == 0 || n == 0 || p+n < p {
		return 0, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, ErrInvalid)
	}
	rs := &d.drv.regs
	for {
		dev, again, err := d.lockOnce(rs, p, n)
		if again == nil {
			return dev, err
		}
		<-again // a registration of an overlapping range was in flight
	}
}

// lockOnce is one try of LockHost; again, when not nil, is a flight that
// overlaps [p, p+n): wait for it and try again.
func (d *device) lockOnce(rs *registrations, p, n uintptr) (dev uintptr, again <-chan struct{}, err error) {
	rs.mu.Lock()
	if f := rs.flights.Overlap(p, p+n); f != nil {
		rs.mu.Unlock()
		return 0, f.Done(), nil
	}
	key := holdKey{d, p}
	if h := rs.holds[key]; h != nil && h.reg.contains(p, n) {
		defer rs.mu.Unlock()
		dev, err := d.devicePointer(p)
		if err != nil {
			return 0, nil, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
		}
		h.count++
		h.reg.refs++
		return dev, nil, nil
	}
	reg := rs.byPiece[p]
	if reg == nil || !reg.contains(p, n) {
		// Inside a registration made here at another address? Ask the
		// driver where p's registration starts rather than fail a register.
		reg = nil
		if start, known := d.rangeStart(p); known {
			reg = rs.ownerLocked(p, n, start, true)
		}
	}
	if reg != nil {
		defer rs.mu.Unlock()
		return d.holdLocked(rs, reg, p, n, false)
	}
	// Register outside the lock, with the range in flight.
	f := rs.flights.Start(p, p+n)
	rs.mu.Unlock()
	reg, err = d.register(p, n)
	rs.mu.Lock()
	rs.flights.Land(f)
	registered := err == nil
	if errors.Is(err, ErrAlreadyRegistered) {
		// The driver could not say where p's registration starts.
		start, known := d.rangeStart(p)
		if reg = rs.ownerLocked(p, n, start, known); reg == nil {
			rs.mu.Unlock()
			return 0, nil, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
		}
		if g := rs.flights.Overlap(reg.host, reg.host+reg.size); g != nil {
			rs.mu.Unlock()
			return 0, g.Done(), nil // on its way out: look again after
		}
	} else if err != nil {
		rs.mu.Unlock()
		return 0, nil, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
	}
	dev, _, err = d.holdLocked(rs, reg, p, n, registered)
	rs.mu.Unlock()
	if err != nil && registered {
		_, _ = reg.drop() // never published: nobody else can see it
	}
	return dev, nil, err
}

// holdLocked gives d a hold on reg for a lock at p, publishing reg when it
// was just registered. rs.mu held.
func (d *device) holdLocked(rs *registrations, reg *registration, p, n uintptr, registered bool) (uintptr, chan struct{}, error) {
	dev, err := d.devicePointer(p)
	if err != nil {
		return 0, nil, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
	}
	if registered {
		for _, pc := range reg.pieces {
			rs.byPiece[pc.host] = reg
			rs.spans[pc.host] = pc.size
		}
		rs.publishLocked()
	}
	key := holdKey{d, p}
	h := rs.holds[key]
	if h == nil {
		h = &hold{reg: reg}
		rs.holds[key] = h
	}
	h.count++
	reg.refs++
	return dev, nil, nil
}

// register registers the pieces of [p, p+n) in d's context, undoing them
// all on failure, and checks that the device sees them as one contiguous
// range. The registration takes its own reference on d's primary context.
func (d *device) register(p, n uintptr) (*registration, error) {
	var ctx uintptr
	if err := d.withCtx("cuDevicePrimaryCtxRetain", func() result {
		return call(d.drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(d.dev))
	}); err != nil {
		return nil, err
	}
	reg := &registration{host: p, size: n, owner: d}
	pieces := split(p, n, MaxRegister)
	for i, pc := range pieces {
		err := d.withCtx("cuMemHostRegister", func() result {
			return call(d.drv.cuMemHostRegister, pc.host, pc.size, cuMemHostRegisterPortable|cuMemHostRegisterDeviceMap)
		})
		if err != nil {
			reg.pieces = pieces[:i]
			_, _ = reg.drop()
			return nil, err
		}
	}
	reg.pieces = pieces
	if len(pieces) > 1 {
		base, err := d.devicePointer(p)
		if err != nil {
			_, _ = reg.drop()
			return nil, err
		}
		for _, pc := range pieces[1:] {
			dev, err := d.devicePointer(pc.host)
			if err == nil && dev != base+(pc.host-p) {
				err = fmt.Errorf("piece %#x+%d maps to device address %#x, not %#x: the device does not see the range as one",
					pc.host, pc.size, dev, base+(pc.host-p))
			}
			if err != nil {
				_, _ = reg.drop()
				return nil, err
			}
		}
	}
	return reg, nil
}

// drop unregisters reg's pieces in its owner's context and then releases
// the registration's reference on that context. The owner may be closed:
// the reference kept its context alive. It returns the pieces it
// unregistered; those it could not stay in reg, with the reference, to be
// retried later.
func (reg *registration) drop() ([]piece, error) {
	o := reg.owner
	var errs []error
	var gone, kept []piece
	for _, pc := range reg.pieces {
		if err := o.withOwnedCtx("cuMemHostUnregister", func() result { return call(o.drv.cuMemHostUnregister, pc.host) }); err != nil {
			errs = append(errs, err)
			kept = append(kept, pc)
		} else {
			gone = append(gone, pc)
		}
	}
	reg.pieces = kept
	if len(kept) > 0 {
		return gone, errors.Join(errs...)
	}
	return gone, o.drv.check("cuDevicePrimaryCtxRelease", call(o.drv.cuDevicePrimaryCtxRelease, uintptr(o.dev)))
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

// UnlockHost releases a lock this device took at p; the registration goes
// when no device holds it any more, unregistered without rs.mu held.
func (d *device) UnlockHost(p uintptr) error {
	rs := &d.drv.regs
	rs.mu.Lock()
	key := holdKey{d, p}
	h := rs.holds[key]
	if h == nil {
		rs.mu.Unlock()
		return fmt.Errorf("%v: unlock %#x: %w", d, p, ErrNotLocked)
	}
	if h.count--; h.count == 0 {
		delete(rs.holds, key)
	}
	if h.reg.refs--; h.reg.refs > 0 {
		rs.mu.Unlock()
		return nil
	}
	return d.unregister(rs, []*registration{h.reg})
}

// unregister drops regs, whose references are all gone: in flight while
// the driver unregisters them, then out of the books. rs.mu held on entry,
// released on return.
func (d *device) unregister(rs *registrations, regs []*registration) error {
	fs := make([]*inflight.Flight, len(regs))
	for i, reg := range regs {
		fs[i] = rs.flights.Start(reg.host, reg.host+reg.size)
	}
	rs.mu.Unlock()
	gone := make([][]piece, len(regs))
	errs := make([]error, len(regs))
	for i, reg := range regs {
		gone[i], errs[i] = reg.drop()
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, reg := range regs {
		for _, pc := range gone[i] {
			delete(rs.byPiece, pc.host)
			delete(rs.spans, pc.host)
		}
		rs.publishLocked()
		rs.flights.Land(fs[i])
		if errs[i] != nil {
			// Pieces the driver keeps stay here too, unreferenced: the next
			// lock of the range reuses the registration, and Close tries again.
			errs[i] = fmt.Errorf("%v: unlock %#x+%d: %w", d, reg.host, reg.size, errs[i])
		}
	}
	return errors.Join(errs...)
}

// releaseAll drops every lock d holds (at Close).
func (rs *registrations) releaseAll(d *device) error {
	rs.mu.Lock()
	var drop []*registration
	for key, h := range rs.holds {
		if key.d != d {
			continue
		}
		delete(rs.holds, key)
		if h.reg.refs -= h.count; h.reg.refs == 0 {
			drop = append(drop, h.reg)
		}
	}
	// Registrations whose unregistration failed earlier: try again (those in
	// flight are someone else's to finish).
	for host, reg := range rs.byPiece {
		if reg.refs == 0 && rs.flights.Overlap(reg.host, reg.host+reg.size) == nil && host == reg.pieces[0].host && !slices.Contains(drop, reg) {
			drop = append(drop, reg)
		}
	}
	if len(drop) == 0 {
		rs.mu.Unlock()
		return nil
	}
	return d.unregister(rs, drop)
}

// ExternalLock reports whether p lies in host memory pinned outside this
// package: registered by the user through the driver (cuMemHostRegister) or
// allocated pinned by it (cuMemHostAlloc). It asks the driver the memory type
// of p and, when it can, the whole range (RANGE_START_ADDR, RANGE_SIZE);
// otherwise [p, p+n) is reported. Ranges this package registered are not
// external: locking them again is shared and counted.
func (d *device) ExternalLock(p, n uintptr) (pinned.External, bool, error) {
	if p == 0 || n == 0 {
		return pinned.External{}, false, fmt.Errorf("%v: external lock query %#x+%d: %w", d, p, n, ErrInvalid)
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
		return pinned.External{}, false, fmt.Errorf("%v: external lock query %#x: %w", d, p, err)
	}
	if r != cudaSuccess || mt != cuMemoryTypeHost {
		return pinned.External{}, false, nil
	}
	start, size := p, n
	var s, z uintptr
	known := d.attr(&s, cuPointerAttributeRangeStartAddr, p) == nil && d.attr(&z, cuPointerAttributeRangeSize, p) == nil &&
		s <= p && z > 0 && p-s < z
	if known {
		start, size = s, z
	}
	rs := &d.drv.regs
	rs.mu.Lock()
	if f := rs.flights.Overlap(start, start+size); f != nil || rs.flights.Overlap(p, p+n) != nil {
		// Being registered or unregistered here: the driver's answer is
		// about our own registration, not published yet or on its way out.
		if f == nil {
			f = rs.flights.Overlap(p, p+n)
		}
		rs.mu.Unlock()
		<-f.Done()
		return d.ExternalLock(p, n)
	}
	ours := rs.ownerLocked(p, 1, start, known) != nil
	rs.mu.Unlock()
	if ours {
		return pinned.External{}, false, nil
	}
	dev, err := d.devicePointer(start)
	if err != nil {
		var dp uintptr
		if d.attr(&dp, cuPointerAttributeDevicePointer, start) != nil {
			return pinned.External{}, false, fmt.Errorf("%v: external lock at %#x: %w", d, start, err)
		}
		dev = dp
	}
	return pinned.External{Host: start, Dev: dev, Size: size}, true, nil
}

// rangeStart is the start of the driver's allocation or registration
// holding p, when the driver can tell.
func (d *device) rangeStart(p uintptr) (uintptr, bool) {
	var s uintptr
	if d.attr(&s, cuPointerAttributeRangeStartAddr, p) != nil || s > p {
		return 0, false
	}
	return s, true
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
