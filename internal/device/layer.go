package device

import "sync/atomic"

// Layer is the public layer's part of a device (target.Device's queues,
// staging pool and device-memory pool), attached to the core device so
// that the core can wait for the layer's queued copies and close it with
// the device. target implements it; the core never imports target.
type Layer interface {
	// AfterUse hands done to every queue of the device with a copy in
	// flight that reads or writes host memory [p, p+n): for each such queue
	// it adds 1 to left, then queues done behind that copy (done may run at
	// once when the copy turns out complete).
	AfterUse(p, n uintptr, left *atomic.Int64, done func())
	// SyncQueues waits for the work of the device's open queues and
	// releases what they held; errors are left for the queues' Close.
	SyncQueues()
	// Close destroys the device's queues (waiting for their work) and
	// closes the layer's pools, before the Impl closes; after runs once
	// the Impl closed (it releases what queues whose wait failed kept).
	Close() (after func(), err error)
	// Public returns the public layer's device (a *target.Device), for
	// packages above target that report on it (memprof).
	Public() any
}

type layerBox struct{ l Layer }

// Attach returns the device's layer, making it with mk at the first call:
// the public layer is made for a device when it is first asked for it, and
// every later call returns the same one.
func (d *Device) Attach(mk func(*Device) Layer) Layer {
	if b := d.layer.Load(); b != nil {
		return b.l
	}
	d.layerMu.Lock()
	defer d.layerMu.Unlock()
	if b := d.layer.Load(); b != nil {
		return b.l
	}
	l := mk(d)
	d.layer.Store(&layerBox{l})
	return l
}

// Layer returns the device's layer, or nil when none was attached: the
// public layer never touched the device, so it has no queues or pools.
func (d *Device) Layer() Layer {
	if b := d.layer.Load(); b != nil {
		return b.l
	}
	return nil
}
