package pinreg

import (
	"fmt"
	"strings"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// MapMode is LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS: whether buffers are
// locked implicitly when they are mapped for transfers.
type MapMode int

const (
	// MapOff (the default): mapped buffers are not locked. LockMapped only
	// reports the device address of a buffer that is already inside an
	// entry, without taking a reference.
	MapOff MapMode = iota
	// MapOn: mapped buffers are locked; failures are ignored (the transfer
	// simply takes the pageable path).
	MapOn
	// MapMandatory: mapped buffers are locked; failures are errors.
	MapMandatory
)

func (m MapMode) String() string {
	switch m {
	case MapOff:
		return "off"
	case MapOn:
		return "on"
	case MapMandatory:
		return "mandatory"
	}
	return fmt.Sprintf("MapMode(%d)", int(m))
}

// ParseMapMode parses a value of envvar.LockMapped: off, on or mandatory (any case, surrounding spaces
// ignored; empty means off).
func ParseMapMode(s string) (MapMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off":
		return MapOff, nil
	case "on":
		return MapOn, nil
	case "mandatory":
		return MapMandatory, nil
	}
	return MapOff, fmt.Errorf("lock mode %q: %w: want off, on or mandatory", s, sentinel.ErrInvalidArgument)
}

// LockMapped takes an implicit lock on [p, p+n) for a mapping and returns
// the device-accessible address of p. locked reports whether a mapped
// reference was taken: call UnlockUnmapped, with the same mode, exactly for
// the calls that returned locked. Mapped references are counted apart from
// Lock's, so an unmap can never drop a user's explicit lock.
//
// With MapOff nothing is locked and no reference is taken; if the range is
// already inside an entry (the user locked it, or the device allocated it
// pinned) its device address is returned with locked=false, so transfers can
// still take the pinned path. With MapOn any failure (driver error, partial
// overlap) gives (0, false, nil). With MapMandatory failures are errors.
// Bad input (nil pointer, zero size, wrap-around, unknown mode) is
// sentinel.ErrInvalidArgument in every mode: callers skip zero-length maps.
func (r *Registry) LockMapped(p, n uintptr, mode MapMode) (dev uintptr, locked bool, err error) {
	if bad(p, n) {
		return 0, false, invalid("LockMapped", p, n)
	}
	switch mode {
	case MapOff:
		if e := r.find(p); e != nil && p+n <= e.end && e.refs.Load()&liveMask != 0 {
			return e.dev + (p - e.host), false, nil
		}
		return 0, false, nil
	case MapOn, MapMandatory:
	default:
		return 0, false, fmt.Errorf("pinned: LockMapped %s: %w: mode %v", span(p, p+n), sentinel.ErrInvalidArgument, mode)
	}
	if e := r.find(p); e != nil && p+n <= e.end && e.acquire(mappedUnit) {
		return e.dev + (p - e.host), true, nil
	}
	dev, err = r.lockSlow("LockMapped", p, n, mappedUnit)
	if err != nil {
		if mode == MapOn {
			return 0, false, nil
		}
		return 0, false, err
	}
	return dev, true, nil
}

// UnlockUnmapped drops one mapped reference of the entry containing p (any
// interior pointer); the last reference of any kind erases the entry and
// unlocks what the registry locked. It never drops a Lock reference. With
// MapOff it does nothing; with MapOn failures (nothing mapped there, a
// failed unlock) are ignored; with MapMandatory they are errors.
func (r *Registry) UnlockUnmapped(p uintptr, mode MapMode) error {
	if p == 0 {
		return nilPointer("UnlockUnmapped")
	}
	switch mode {
	case MapOff:
		return nil
	case MapOn, MapMandatory:
	default:
		return fmt.Errorf("pinned: UnlockUnmapped %#x: %w: mode %v", p, sentinel.ErrInvalidArgument, mode)
	}
	err := r.unlock("UnlockUnmapped", p, mappedUnit)
	if mode == MapOn {
		return nil
	}
	return err
}
