package device

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Shutdown closes every device: its layer first (queues waited for and
// destroyed, pools freed), then the vendor's Impl. Devices from before are
// unusable afterwards; the next use discovers anew.
//
// Memory held for live pinned blocks cannot be given up behind its owner's
// back: after the BeforeShutdown functions ran (alloc releases its idle
// pinned chunks), any device still holding some makes Shutdown refuse with
// ErrBusy and change nothing.
func Shutdown() error {
	if w := current.Load(); w != nil {
		// Frees waiting on a queue (alloc.FreeAfter, Queue.OnDone) happen before the hooks.
		for _, d := range w.devices {
			if l := d.Layer(); l != nil {
				l.SyncQueues()
			}
		}
	}
	runShutdownHooks()
	holdFns.Store(true)
	defer runHeldFns() // after the locks below are let go
	worldMu.Lock()
	defer worldMu.Unlock()
	holdMu.Lock()
	defer holdMu.Unlock()
	w := current.Load()
	if w == nil {
		return nil
	}
	if err := busy(w.devices); err != nil {
		return fmt.Errorf("target: Shutdown refused: %w", err)
	}
	current.Store(nil)
	var errs []error
	for _, d := range w.devices {
		errs = append(errs, d.close())
	}
	return errors.Join(errs...)
}

// While Shutdown holds the world's locks, the functions that destroying its
// queues releases wait for it to let go of them: a deferred free may give a
// pinned chunk back, which unlocks it through a device and takes those locks.
var (
	holdFns   atomic.Bool
	heldFnsMu sync.Mutex
	heldFns   []func()
)

// Run runs fn, a function a queue's release runs (what Queue.OnDone deferred),
// now, or once Shutdown let go of its locks when it runs meanwhile.
func Run(fn func()) {
	if holdFns.Load() {
		heldFnsMu.Lock()
		if holdFns.Load() {
			heldFns = append(heldFns, fn)
			heldFnsMu.Unlock()
			return
		}
		heldFnsMu.Unlock()
	}
	fn()
}

// runHeldFns stops holding functions back and runs those held.
func runHeldFns() {
	heldFnsMu.Lock()
	holdFns.Store(false)
	fns := heldFns
	heldFns = nil
	heldFnsMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
