package plugin

// PeerCopier is implemented by an Impl whose driver copies directly between
// two devices of the same plugin, as LLVM's plugins do for data exchange:
// CUDA with cuDeviceCanAccessPeer, cuCtxEnablePeerAccess and
// cuMemcpyPeerAsync; HSA by allowing both agents access to the memory and
// hsa_amd_memory_async_copy between their pools.
//
// target uses it for Memcpy and MemcpyAsync between two accelerators of the
// same plugin. Without it, or when PeerAccess answers false, target bounces
// the bytes through pinned host buffers (two in flight), never through
// pageable memory.
type PeerCopier interface {
	// PeerAccess reports whether copies between this device's memory and
	// peer's can go device to device, in both directions, enabling whatever
	// access the driver needs for that the first time the pair is asked.
	// peer is another Impl of the same plugin, never the receiver itself.
	// false with a nil error: the devices cannot reach each other. An error:
	// the driver failed to say or to enable access. After the first call
	// for a pair the answer must come without a driver call: target asks
	// before every copy.
	PeerAccess(peer Impl) (bool, error)

	// CopyPeer copies n bytes from src in srcDev's memory to dst in dstDev's
	// memory. The receiver is one of srcDev and dstDev, the other one an Impl
	// of the same plugin for which PeerAccess answered true.
	//
	// With q nil the copy is complete when CopyPeer returns: a later read of
	// dst by either device, on any queue, sees the bytes. Otherwise q is a
	// queue of the receiver: the copy runs after the work issued on q
	// before it and before the work issued after it, and may still be
	// running when CopyPeer returns (q.Synchronize waits for it). Work on
	// the other device's queues is not ordered with it.
	//
	// As for Impl.Copy, the generic layer (target) checks the arguments
	// once, for every vendor: CopyPeer is called only with n > 0, dst and
	// src not nil, neither range wrapping around the address space, and q
	// nil or an open queue of the receiver (TestPeerCopyChecksAreGeneric).
	// A vendor does not check these again; it only reaches its own device
	// and queue types from dstDev, srcDev and q, refusing any other with an
	// error rather than a panic.
	CopyPeer(dst uintptr, dstDev Impl, src uintptr, srcDev Impl, n uintptr, q QueueImpl) error
}

// Opener is implemented by an Impl that opens its device lazily, on first
// use, as LLVM's plugins do: discovery then takes nothing from the device
// (a CUDA primary context costs device memory on every GPU it is made on),
// and a device that cannot be opened (compute mode PROHIBITED, out of
// memory) does not take the others down with it. target calls Open before
// every operation of the device, so it must be cheap once the device is
// open; Info must work without it.
type Opener interface {
	// Open opens the device if it is not open yet. It returns nil, or the
	// error the first opening failed with, on every call: a device that
	// failed to open stays listed and unusable.
	Open() error
}
