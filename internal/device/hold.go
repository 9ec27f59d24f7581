package device

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// holdMu orders Hold against Shutdown: holds take it shared, Shutdown
// exclusively around its check and the close, so no chunk is held on a
// device that Shutdown found free and then closes.
var holdMu sync.RWMutex

// Hold page-locks [p, p+n), memory the caller mapped for itself, for d,
// with a reference only Release drops (pinreg.Registry.Hold): a user's
// UnlockMem can never unlock it, and errors about it name owner. The
// pinned heaps (alloc's pinSource) hold their chunks this way. hugeTLB
// says the memory is a hugetlb mapping, which the kernel locks without
// counting it in VmLck (HugeTLBRanges). It returns the device's address
// for p.
func (d *Device) Hold(p, n uintptr, owner string, hugeTLB bool) (uintptr, error) {
	holdMu.RLock()
	defer holdMu.RUnlock()
	if err := d.Usable(); err != nil {
		return 0, err
	}
	dev, err := d.reg.Hold(p, n, owner)
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", d.ID, err)
	}
	if hugeTLB {
		d.tlbMu.Lock()
		if d.tlb == nil {
			d.tlb = map[uintptr]uintptr{}
		}
		d.tlb[p] = n
		d.tlbMu.Unlock()
	}
	return dev, nil
}

// Release unlocks what Hold locked at p, dropping any LockMem and mapped
// references still inside it; it reports how many there were.
func (d *Device) Release(p uintptr) (locks, mapped int, err error) {
	if err := d.Usable(); err != nil {
		return 0, 0, err
	}
	locks, mapped, err = d.reg.Release(p)
	if err != nil {
		return locks, mapped, fmt.Errorf("device %d: %w", d.ID, err)
	}
	d.tlbMu.Lock()
	delete(d.tlb, p)
	d.tlbMu.Unlock()
	return locks, mapped, nil
}

// Range is [Start, Start+Size) of host memory held for Device.
type Range struct {
	Start, Size uintptr
	Device      int
}

// HugeTLBRanges lists the hugetlb mappings the current world's devices
// hold (Hold with hugeTLB), in address order. The kernel does not count
// them in VmLck although they are locked and registered (mlock of hugetlb
// memory succeeds and changes nothing: the pages are never swapped);
// internal/leakcheck leaves them out of its VmLck sum.
func HugeTLBRanges() []Range {
	w := current.Load()
	if w == nil {
		return nil
	}
	var out []Range
	for _, d := range w.devices {
		d.tlbMu.Lock()
		for p, n := range d.tlb {
			out = append(out, Range{Start: p, Size: n, Device: d.ID})
		}
		d.tlbMu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
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

var (
	hookMu        sync.Mutex
	shutdownHooks []func()
)

// BeforeShutdown registers f to run at the start of every Shutdown, before
// it checks for held memory: alloc gives back its idle pinned chunks there.
func BeforeShutdown(f func()) {
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
