// Package cuda is the plugin of NVIDIA GPUs, over the CUDA driver API
// (libcuda.so.1) loaded at run time through purego, with no cgo.
//
// Nothing is loaded until Init. The library is found through loader.Lazy:
// OMPALLOC_CUDA_LIBRARY names it explicitly, OMPALLOC_DISABLE_CUDA=1 switches
// it off, and a machine without the driver simply has no CUDA devices (Init
// returns an error wrapping loader.ErrNotFound). Init describes each device
// without a context; a device retains its primary context when it is first
// used (Open), so one that cannot be opened (compute mode PROHIBITED, out of
// memory) stays listed under its ordinal and fails alone. Before the retain
// activates it, the primary context gets CU_CTX_SCHED_BLOCKING_SYNC (or what
// OMPALLOC_CUDA_SCHED chooses) unless something else activated it first;
// events the host may wait for are CU_EVENT_BLOCKING_SYNC under the blocking
// choice, so that cuEventSynchronize sleeps too (the reference ties an
// event's blocking wait to that event flag), and CU_EVENT_DISABLE_TIMING
// unless they time. An
// event is recorded on a stream of its own device (the driver refuses
// another context's with CUDA_ERROR_INVALID_HANDLE) and timed against an
// event of the same device only.
// Every driver call that needs a context runs on a locked OS thread with that
// context pushed (cuCtxPushCurrent_v2) and popped afterwards, since the
// driver's current context is per OS thread and the caller's own context
// stack must be left as it was.
//
// Copies on a queue go on its non-blocking stream. A copy without a queue
// runs on a stream of the device's own and is synchronized before Copy
// returns: the driver's "synchronous" cuMemcpy*_v2 calls are not complete on
// return for device-to-device copies or pageable sources, and run on the
// legacy stream, which non-blocking streams do not wait for. Copies between
// two devices that reach each other are cuMemcpyPeerAsync after
// cuCtxEnablePeerAccess both ways (PeerAccess, CopyPeer). A copy whose host
// range crosses the edge of a registration made here is issued as one copy
// per part: the driver refuses a range partly registered, partly pageable.
//
// Page-locking host memory is cuMemHostRegister_v2 with PORTABLE, in pieces of
// at most 64 GiB, of whole pages. A registration is process-wide in CUDA, so
// every device of the plugin locks through one table of them
// (internal/regtab): each page is registered once and shared by reference
// count among devices and ranges (locking a buffer for devices 0 and 1
// registers it once, two slices in one page share it), and the last unlock
// unregisters it. A registration keeps a reference on the registering
// device's primary context until then, so closing that device first does
// not drop it.
// Memory the user registered through the driver is reported by ExternalLock
// and never unregistered here.
//
// Every driver failure is an *Error carrying the call, the CUresult and the
// driver's name for it (cuGetErrorName), for example
// "cuMemHostRegister: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)"; it
// matches the code sentinels (ErrNoDevice, ...) with errors.Is.
package cuda
