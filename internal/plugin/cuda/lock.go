package cuda

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
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

// hold is a device's locks at an address, newest last: each lists the
// registrations covering its pages (one, or several when its pages were
// partly registered already for another range sharing a page).
type hold struct {
	grants [][]*registration
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

// LockHost registers the pages of [p, p+n) with the driver (PORTABLE, so
// every context sees them) in pieces of at most MaxRegister bytes and
// returns the device address of p. The driver pins whole pages and refuses
// a second registration of a page (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED):
// so registrations here are of whole pages, and pages this package
// registered already, for this device or another, for this range or
// another one sharing a page (two small slices), are shared and counted
// instead of registered again; only the pages no registration made here
// covers are registered. The driver is asked to register without rs.mu
// held (see registrations).
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

// hostPage is the granule of registrations: the driver page-locks whole
// pages of the host's size.
var hostPage = uintptr(os.Getpagesize())

func pageDown(p uintptr) uintptr { return p &^ (hostPage - 1) }
func pageUp(p uintptr) uintptr   { return (p + hostPage - 1) &^ (hostPage - 1) }

// lockOnce is one try of LockHost; again, when not nil, is a flight that
// overlaps the pages of [p, p+n): wait for it and try again.
func (d *device) lockOnce(rs *registrations, p, n uintptr) (dev uintptr, again <-chan struct{}, err error) {
	lo, hi := pageDown(p), pageUp(p+n)
	rs.mu.Lock()
	if f := rs.flights.Overlap(lo, hi); f != nil {
		rs.mu.Unlock()
		return 0, f.Done(), nil
	}
	regs, gaps := rs.coverLocked(lo, hi)
	if len(gaps) == 0 {
		defer rs.mu.Unlock()
		dev, err := d.devicePointer(p)
		if err != nil {
			return 0, nil, fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, err)
		}
		rs.grantLocked(d, p, regs)
		return dev, nil, nil
	}
	// The registrations already covering some pages are referenced now, so
	// that none goes while the gaps are registered outside the lock, with
	// the gaps in flight.
	for _, reg := range regs {
		reg.refs++
	}
	fs := make([]*inflight.Flight, len(gaps))
	for i, g := range gaps {
		fs[i] = rs.flights.Start(g.host, g.host+g.size)
	}
	rs.mu.Unlock()
	var made []*registration
	for _, g := range gaps {
		reg, err := d.register(g.host, g.size)
		if err != nil {
			if errors.Is(err, ErrAlreadyRegistered) {
				err = fmt.Errorf("pages [%#x, %#x) are registered outside ompalloc (cuMemHostRegister, cuMemHostAlloc): lock the whole registered range, or unregister it first: %w",
					g.host, g.host+g.size, err)
			}
			return 0, nil, d.lockFailed(rs, fs, regs, made, p, n, err)
		}
		made = append(made, reg)
	}
	dev, err = d.devicePointer(p)
	if err == nil {
		// The device must see the range as one: every registration at the
		// address the first implies (true under unified addressing).
		for _, reg := range made {
			at := max(reg.host, p)
			if got, err2 := d.devicePointer(at); err2 != nil {
				err = err2
			} else if got != dev+(at-p) {
				err = fmt.Errorf("pages at %#x map to device address %#x, not %#x: the device does not see the range as one", at, got, dev+(at-p))
			}
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		return 0, nil, d.lockFailed(rs, fs, regs, made, p, n, err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, f := range fs {
		rs.flights.Land(f)
	}
	for _, reg := range made {
		for _, pc := range reg.pieces {
			rs.byPiece[pc.host] = reg
			rs.spans[pc.host] = pc.size
		}
	}
	rs.publishLocked()
	for _, reg := range regs {
		reg.refs-- // the grant takes its own reference
	}
	all, _ := rs.coverLocked(lo, hi)
	rs.grantLocked(d, p, all)
	return dev, nil, nil
}

// lockFailed undoes a lock whose new registrations failed: it drops those
// made, lands the flights and lets go of the references taken on the
// registrations that already covered pages (the last one unregisters).
func (d *device) lockFailed(rs *registrations, fs []*inflight.Flight, regs, made []*registration, p, n uintptr, err error) error {
	var errs []error
	for _, reg := range made {
		_, derr := reg.drop() // never published: nobody else can see it
		errs = append(errs, derr)
	}
	rs.mu.Lock()
	for _, f := range fs {
		rs.flights.Land(f)
	}
	var gone []*registration
	for _, reg := range regs {
		if reg.refs--; reg.refs == 0 {
			gone = append(gone, reg)
		}
	}
	err = fmt.Errorf("%v: lock %#x+%d: %w", d, p, n, errors.Join(append([]error{err}, errs...)...))
	if len(gone) == 0 {
		rs.mu.Unlock()
		return err
	}
	return errors.Join(err, d.unregister(rs, gone))
}

// coverLocked returns the registrations made here that hold pages of
// [lo, hi), in address order, and the runs of its pages none holds.
// rs.mu held.
func (rs *registrations) coverLocked(lo, hi uintptr) (regs []*registration, gaps []piece) {
	q := lo
	if sp := rs.sorted.Load(); sp != nil {
		s := *sp
		i := sort.Search(len(s), func(i int) bool { return s[i].host+s[i].size > lo })
		for ; i < len(s) && s[i].host < hi; i++ {
			if s[i].host > q {
				gaps = append(gaps, piece{q, s[i].host - q})
			}
			if reg := rs.byPiece[s[i].host]; reg != nil && (len(regs) == 0 || regs[len(regs)-1] != reg) {
				regs = append(regs, reg)
			}
			q = max(q, s[i].host+s[i].size)
		}
	}
	if q < hi {
		gaps = append(gaps, piece{q, hi - q})
	}
	return regs, gaps
}

// grantLocked records a lock of d at p over regs, one reference on each.
// rs.mu held.
func (rs *registrations) grantLocked(d *device, p uintptr, regs []*registration) {
	key := holdKey{d, p}
	h := rs.holds[key]
	if h == nil {
		h = &hold{}
		rs.holds[key] = h
	}
	h.grants = append(h.grants, regs)
	for _, reg := range regs {
		reg.refs++
	}
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

// UnlockHost releases a lock this device took at p (its newest there); a
// registration goes when no lock holds it any more, unregistered without
// rs.mu held.
func (d *device) UnlockHost(p uintptr) error {
	rs := &d.drv.regs
	rs.mu.Lock()
	key := holdKey{d, p}
	h := rs.holds[key]
	if h == nil {
		rs.mu.Unlock()
		return fmt.Errorf("%v: unlock %#x: %w", d, p, ErrNotLocked)
	}
	g := h.grants[len(h.grants)-1]
	if h.grants = h.grants[:len(h.grants)-1]; len(h.grants) == 0 {
		delete(rs.holds, key)
	}
	var gone []*registration
	for _, reg := range g {
		if reg.refs--; reg.refs == 0 {
			gone = append(gone, reg)
		}
	}
	if len(gone) == 0 {
		rs.mu.Unlock()
		return nil
	}
	return d.unregister(rs, gone)
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
		for _, g := range h.grants {
			for _, reg := range g {
				if reg.refs--; reg.refs == 0 {
					drop = append(drop, reg)
				}
			}
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

// attr reads a pointer attribute that is pointer-sized (an address or size).
func (d *device) attr(out *uintptr, attribute int, p uintptr) error {
	var v uintptr
	err := d.withCtx("cuPointerGetAttribute", func() result {
		return call(d.drv.cuPointerGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attribute), p)
	})
	*out = v
	return err
}
