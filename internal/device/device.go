package device

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Device is one device of the current discovery: the vendor's Impl, the
// registry of host ranges locked for it, and whether it is open or closed.
// target.Device wraps it; alloc and kmp use it directly.
type Device struct {
	ID int // OpenMP device number

	impl   plugin.Impl
	opener plugin.Opener // nil: the Impl is open from the start
	plugin string
	host   bool
	reg    *pinreg.Registry

	infoOnce sync.Once
	info     plugin.Info

	tlbMu sync.Mutex
	tlb   map[uintptr]uintptr // the hugetlb mappings held: start → size

	closed atomic.Bool
	opened atomic.Bool // Usable found the device open once

	layerMu sync.Mutex
	layer   atomic.Pointer[layerBox] // the public layer's part (Attach)
}

func newDevice(id int, impl plugin.Impl, pluginName string, host bool) *Device {
	opener, _ := impl.(plugin.Opener)
	return &Device{ID: id, impl: impl, opener: opener, plugin: pluginName, host: host, reg: pinreg.New(impl)}
}

// Impl is the vendor's device.
func (d *Device) Impl() plugin.Impl { return d.impl }

// Registry is the device's registry of locked host ranges.
func (d *Device) Registry() *pinreg.Registry { return d.reg }

// Plugin is the name of the plugin that drives d: "host", "cuda", "amdgpu".
func (d *Device) Plugin() string { return d.plugin }

// IsHost reports whether d is the host (the initial device).
func (d *Device) IsHost() bool { return d.host }

// Info describes the device. It is read from the plugin once.
func (d *Device) Info() plugin.Info {
	d.infoOnce.Do(func() { d.info = d.impl.Info() })
	return d.info
}

// Opened reports whether the device was found open once (Usable): asking
// an unopened device about memory would open it.
func (d *Device) Opened() bool { return d.opened.Load() }

// Closed reports whether Shutdown closed the device.
func (d *Device) Closed() bool { return d.closed.Load() }

// Usable opens the device at its first use and reports why it cannot be
// used: nil, or an error matching ErrUnavailable (with the driver's reason)
// or ErrShutdown. Discovery opens nothing: a device that cannot be opened
// keeps its number and fails each operation with that same error.
func (d *Device) Usable() error {
	if d.closed.Load() {
		return fmt.Errorf("device %d: %w", d.ID, ErrShutdown)
	}
	if d.opener != nil {
		if err := d.opener.Open(); err != nil {
			return fmt.Errorf("device %d: %w: %w", d.ID, ErrUnavailable, err)
		}
	}
	if !d.opened.Load() {
		d.opened.Store(true)
	}
	return nil
}

// close closes the public layer's part of the device (its queues, after
// waiting for their work, and its pools), then the Impl; then releases
// what the layer kept for work that can no longer run.
func (d *Device) close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var after func()
	var errs []error
	if l := d.Layer(); l != nil {
		var err error
		after, err = l.Close()
		errs = append(errs, err)
	}
	if err := d.impl.Close(); err != nil {
		errs = append(errs, fmt.Errorf("device %d: close: %w", d.ID, err))
	}
	if after != nil {
		after()
	}
	return joinErrs(errs)
}
