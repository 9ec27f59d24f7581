package target

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/hooks"
)

// holdMu orders HoldMem against Shutdown: holds take it shared, Shutdown
// exclusively around its check and the close, so no chunk is held on a
// device that Shutdown found free and then closes.
var holdMu sync.RWMutex

var (
	hookMu        sync.Mutex
	shutdownHooks []func()
)

// beforeShutdown registers f to run at the start of every Shutdown, before
// it checks for held memory: alloc gives back its idle pinned chunks there
// (through internal/hooks).
func beforeShutdown(f func()) {
	hookMu.Lock()
	defer hookMu.Unlock()
	shutdownHooks = append(shutdownHooks, f)
}

func runShutdownHooks() {
	hookMu.Lock()
	hooks := append([]func(){}, shutdownHooks...)
	hookMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

func init() {
	hooks.BeforeShutdown = beforeShutdown
	hooks.HoldMem = func(dev int, p, n uintptr, owner string) (uintptr, error) {
		d, err := Get(dev)
		if err != nil {
			return 0, err
		}
		return d.holdMem(p, n, owner)
	}
	hooks.ReleaseMem = func(dev int, p uintptr) (int, int, error) {
		d, err := Get(dev)
		if err != nil {
			return 0, 0, err
		}
		return d.releaseMem(p)
	}
	hooks.FreeAfterUse = freeAfterUse
	hooks.DeviceImpl = func(dev int) any {
		d, err := Get(dev)
		if err != nil {
			return nil
		}
		return d.impl
	}
}

// holdMem page-locks [p, p+n), memory the caller mapped for itself, for d,
// with a reference only releaseMem drops (pinreg.Registry.Hold): a user's
// UnlockMem can never unlock it, and errors about it name owner. The pinned
// heaps (alloc, through internal/hooks) hold their chunks this way.
func (d *Device) holdMem(p, n uintptr, owner string) (uintptr, error) {
	holdMu.RLock()
	defer holdMu.RUnlock()
	if err := d.usable(); err != nil {
		return 0, err
	}
	dev, err := d.reg.Hold(p, n, owner)
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", d.ID, err)
	}
	return dev, nil
}

// releaseMem unlocks what holdMem locked at p, dropping any LockMem and
// mapped references still inside it; it reports how many there were.
func (d *Device) releaseMem(p uintptr) (locks, mapped int, err error) {
	if err := d.usable(); err != nil {
		return 0, 0, err
	}
	locks, mapped, err = d.reg.Release(p)
	if err != nil {
		return locks, mapped, fmt.Errorf("device %d: %w", d.ID, err)
	}
	return locks, mapped, nil
}

// busy reports the devices whose registries still hold memory for an owner
// (under holdMu).
func busy(devs []*Device) error {
	var errs []error
	for _, d := range devs {
		if n, b := d.reg.HeldStats(); n > 0 {
			errs = append(errs, fmt.Errorf("device %d: %w: %d held ranges (%d bytes) locked for live pinned blocks; free them first",
				d.ID, ErrBusy, n, b))
		}
	}
	return errors.Join(errs...)
}
