// Package regtab is the process-wide table of a driver's host registrations:
// the one place that counts who holds which host pages registered with
// (locked for) a GPU driver, decides which driver calls to make, keeps them
// out of every mutex, and answers which registration covers a copy's range.
//
// Why one table, below the plugins: a driver's registrations are the
// process's, not a device's. cuMemHostRegister pins pages for every context
// (PORTABLE) and refuses a page registered already
// (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); hsa_amd_memory_lock locks for
// a list of agents, counts nothing, and its first unlock ends every lock of
// the range. So a plugin must remember its own registrations, share them
// among its devices and among ranges that share a page, and undo one only
// when its last holder lets go. Each vendor used to keep a table of its own
// with its own in-flight protocol; now a plugin makes only the raw driver
// call for the range this table tells it to register or unregister
// (Register, Config.Unregister), and says what the device address of a
// locked range is (Resolve).
//
// # What it records
//
// A registration is a host range, a value the plugin keeps with it (the
// device whose context made it, the agent pointer from lock time) and a
// reference count. Registrations never overlap. A hold is one Lock of a
// holder (a device) at an address: the registrations its range needed, each
// referenced once; Unlock drops the holder's newest hold there, and a
// registration whose last reference goes is unregistered.
//
// Two modes, as the drivers differ:
//
//   - Pages (CUDA): a lock covers the whole pages of its range. Registrations
//     made here that hold some of those pages are shared (two small slices in
//     one page, a range inside another device's lock, a range running past
//     one), and only the runs of pages none holds are registered, each in
//     pieces of at most Config.MaxPiece bytes (one registration each), so no
//     page is ever registered twice.
//   - Exact (HSA): a lock inside a registration shares it; one that overlaps a
//     registration without lying inside it is refused (Config.Overlap); any
//     other is registered as it is.
//
// A failed driver call leaves the table as it was: what the failing Lock
// registered is unregistered again, and the references it took are dropped.
// A failed unregister keeps the registration (the driver may still hold the
// pages): unreferenced, to be reused by the next lock of its pages and tried
// again by ReleaseAll; and when the error wraps sentinel.ErrStillLocked (the
// driver says nothing changed, so a retry is safe), the hold too, so that the
// caller's retry of Unlock unregisters it.
//
// # Concurrency: the in-flight protocol
//
// The table's mutex covers its books, never a driver call: registering a GiB
// takes up to seconds and unregistering synchronizes with the device, and the
// lock of one range must not wait for either on another range. A range being
// registered or unregistered is in flight (package inflight): a Lock,
// Unlock's successor or a query whose range shares a page with it waits for
// it to land and looks again, so two callers never both register a page, and
// none uses a registration on its way out; callers of other ranges go on.
// Copies read the registrations' edges without the mutex (Cut: an atomic load
// and a binary search).
package regtab
