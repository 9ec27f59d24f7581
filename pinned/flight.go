package pinned

import "os"

// Locker calls without the writer mutex.
//
// Locking a range through a device can take as long as the range
// (cuMemHostRegister of GiB: seconds) and unlocking synchronizes with the
// device (cuMemHostUnregister, hsa_amd_memory_unlock). Under mu, every lock,
// unlock, Hold and Release of the device would wait for them, including a
// pinned heap's next chunk waiting for the unlock of the one a Trim gives
// back. So a writer decides under mu, marks the range in flight, drops mu
// for the Locker call and takes it again to record the outcome. A writer
// whose range overlaps a flight waits for it to land and then looks again,
// so the Locker never sees two calls for overlapping ranges at once, and an
// entry being unlocked (dead word, still in the tree) is never taken for a
// live one. Readers that walk every entry (Stats, Each, Dump, HeldStats)
// wait for every flight, so what they see agrees with the device.

// flight is a range whose Locker call runs without mu.
type flight struct {
	host, end uintptr
	done      chan struct{}
}

// fly marks [p, end) in flight (under mu).
func (r *Registry) fly(p, end uintptr) *flight {
	f := &flight{host: p, end: end, done: make(chan struct{})}
	r.flights = append(r.flights, f)
	return f
}

// land ends flight f and wakes who waits for it (under mu).
func (r *Registry) land(f *flight) {
	for i, g := range r.flights {
		if g == f {
			r.flights = append(r.flights[:i], r.flights[i+1:]...)
			break
		}
	}
	close(f.done)
}

// flying returns a flight sharing a page with [p, end), or nil (under mu).
// Pages, not bytes: drivers lock and unlock whole pages, so the unlock of
// one range and the lock of another in the same page stay in order.
func (r *Registry) flying(p, end uintptr) *flight {
	p, end = p&^(sysPage-1), (end+sysPage-1)&^(sysPage-1)
	for _, f := range r.flights {
		if p < f.end && f.host < end {
			return f
		}
	}
	return nil
}

// sysPage is the system's page size (4 KiB, or 16 or 64 KiB on some arm64
// kernels).
var sysPage = uintptr(os.Getpagesize())

// settle waits, dropping mu meanwhile, until no flight overlaps [p, end)
// (mu held before and after).
func (r *Registry) settle(p, end uintptr) {
	for f := r.flying(p, end); f != nil; f = r.flying(p, end) {
		r.mu.Unlock()
		<-f.done
		r.mu.Lock()
	}
}

// settleAll waits until nothing is in flight (mu held before and after).
func (r *Registry) settleAll() { r.settle(0, ^uintptr(0)) }

// unlocked runs f, a Locker call for [p, end), with [p, end) in flight and
// mu released (mu held before and after).
func (r *Registry) unlocked(p, end uintptr, f func()) {
	fl := r.fly(p, end)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.land(fl)
	}()
	f()
}
