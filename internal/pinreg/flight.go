package pinreg

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

// settle waits, dropping mu meanwhile, until no flight shares a page with
// [p, end) (mu held before and after). Pages, not bytes: drivers lock and
// unlock whole pages, so the unlock of one range and the lock of another in
// the same page stay in order.
func (r *Registry) settle(p, end uintptr) { r.flights.Settle(&r.mu, p, end) }

// settleAll waits until nothing is in flight (mu held before and after).
func (r *Registry) settleAll() { r.settle(0, ^uintptr(0)) }

// unlocked runs f, a Locker call for [p, end), with [p, end) in flight and
// mu released (mu held before and after).
func (r *Registry) unlocked(p, end uintptr, f func()) { r.flights.Outside(&r.mu, p, end, f) }
