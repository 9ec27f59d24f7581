// Package device is the device core that alloc, kmp, memprof and target
// share: the devices in OpenMP numbering and their discovery, each device's
// vendor Impl (internal/plugin) and pinned registry (internal/pinreg), the
// holding and releasing of pinned-heap chunks and its ordering against
// Shutdown, the functions that run before Shutdown, and the accounting of
// host memory that queued copies still use (the stream-ordered free).
//
// Everything here is a plain call: alloc's pinned heap holds a chunk with
// device.Get(dev) then (*Device).Hold, which calls the registry, which calls
// the vendor's LockHost. target is the public layer above it: target.Device
// wraps a *Device and adds what only users see (argument checks, transfers,
// queues, the staging and device-memory pools); it attaches that part to
// the core device as a Layer, which the core asks to wait for queued copies
// (FreeAfterUse) and closes with the device (Shutdown).
//
// The package is internal: the raw Hold and Release it offers must not be
// reachable from outside the module (a user who could Release a chunk a
// pinned heap holds would make the heap, the registry and the kernel
// disagree).
package device
