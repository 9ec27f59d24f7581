// Package inflight keeps the host ranges whose driver lock or unlock is in
// progress outside the mutex of the table that records them.
//
// Why: a driver call that locks, registers or unlocks host memory takes as
// long as the range (cuMemHostRegister of GiB: seconds) or synchronizes with
// the device (cuMemHostUnregister, hsa_amd_memory_unlock), so it must run
// outside every allocator lock (ARCHITECTURE.md, "Lock ordering around driver
// calls"). Meanwhile the range is in flight: a caller whose range shares a
// page with it (drivers lock and unlock whole pages, so the unlock of one
// range and the lock of another in the same page must stay in order) waits
// for it to land and looks again, while callers of other ranges go on.
//
// A Table has no mutex of its own: every method but Flight.Done is called
// with the owner's mutex held, the one that guards the owner's books.
// The two tables that call drivers use it, and nothing else does:
// pinreg.Registry (a device's locks) and regtab.Table (a driver's
// registrations, which the plugins keep there).
package inflight
