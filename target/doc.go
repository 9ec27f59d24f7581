// Package target gives a Go program the devices OpenMP numbers: get one,
// allocate memory on it, copy typed slices to and from it, and page-lock
// host memory for it:
//
//	d, err := target.Get(target.DefaultDevice()) // the first GPU; the host on a machine without one
//	buf, err := target.AllocArray[float32](d, MemDevice, len(xs))
//	err = target.CopyToDevice(buf, xs, nil)     // a nil queue: done on return
//	err = target.CopyFromDevice(xs, buf, nil)
//	h, err := target.Pin(xs, d.ID)              // page-locks a slice the program has; h.Unpin()
//	q, err := d.NewQueue()                      // copies in order on q; q.Synchronize(ctx) waits
//
// (Device.Alloc, Memcpy and Device.LockMem do the same with raw addresses,
// as omp_target_alloc, omp_target_memcpy and llvm_omp_target_lock_mem do.)
// Underneath it is the generic device layer: the logic LLVM's
// GenericDeviceTy writes once for every vendor, over the thin per-vendor
// plugin.Impl (internal/plugin/host, internal/plugin/cuda, internal/plugin/amdgpu).
//
// # Numbering
//
// Devices are numbered as OpenMP does. The accelerators come first, 0..n-1,
// in plugin order (CUDA devices, then AMD GPUs); the host is the initial
// device, number n. On a machine without accelerators device 0 is the host.
// Plugins are loaded and devices discovered at first use, once; a plugin
// whose driver is absent or fails to initialise contributes no devices, and
// its status is kept for `ompalloc info` (Plugins). Discovery opens no
// device: a device is opened at its first use (plugin.Opener; for CUDA, its
// primary context is retained then), so a process that uses one GPU takes
// no memory on the others. A device that cannot be opened (a GPU in compute
// mode PROHIBITED, or out of memory for its context) keeps its number —
// CUDA ordinals stay OpenMP device numbers — and answers Info, and every
// operation on it fails with an error matching ErrUnavailable that names
// the device and the driver's reason (Device.Open reports it up front);
// the other devices work. Every call takes the
// initial device as well as the accelerators; any other number is an error
// matching ErrBadDevice that names the valid range.
//
// # Memory without unsafe
//
// Device.Alloc returns an address (uintptr), as drivers do, for
// Memcpy and the OpenMP-shaped calls. Array[T] is the typed door: n
// elements of T of a kind on a device (AllocArray; PoolArray from the
// device's pool), a part of them (Slice), a []T over host-accessible
// memory (Host: host and shared kinds, and every kind on the host device;
// GPU device memory is refused with an error, never handed out as a slice
// to fault on) and an unsafe.Pointer for the device's own code (Pointer),
// with no conversion in the caller's code for go vet to flag.
// CopyToDevice, CopyFromDevice and CopyArray copy []T to, from and
// between devices, synchronously or on a Queue, with no uintptr in the
// caller's code. A queued copy of a Go slice keeps the slice reachable and
// in place (runtime.Pinner) until the copy completed.
//
// # Pinning what the program has
//
// Pin page-locks an existing slice of pointer-free elements for a device
// (or AllDevices) through the device's registry, so it nests and shares as
// llvm_omp_target_lock_mem does; the handle's Unpin or Close undoes it, and
// the handle keeps the Go object reachable and pinned (runtime.Pinner)
// meanwhile. Only memory known not to move is accepted: Go heap objects
// and globals (proved by runtime.AddCleanup accepting the pointer), and
// memory ompalloc allocated or a registry knows; a goroutine stack (Go
// moves stacks) or foreign C memory is refused. IsPinned answers for any
// memory: the registries, then each open driver's pointer attributes.
//
// # Device-memory pool
//
// Device.PoolAlloc and PoolFree cache device memory per device, as
// PyTorch's, CuPy's and RMM's allocators do (omp_target_alloc, the device
// memory spaces use them; PoolArray and Array.FreeOn are the typed forms,
// AllocArray stays a direct driver allocation). The rules:
//
//   - every copy ompalloc queues on a block records its queue on the block;
//     Queue.RecordUse records work ompalloc did not issue (a kernel);
//   - a block freed with a queue is reused at once by that queue when no
//     other queue recorded it, and by others once the work issued before
//     the free on that queue and on every recorded queue is done (so a
//     free on one queue while another still reads the block is safe);
//   - one freed without a queue waits for every open queue's work (and the
//     recorded queues of other devices), without blocking the host;
//   - an allocation the driver refuses for want of memory gives back what
//     the pool caches and is retried once; the error then matches
//     ErrOutOfMemory;
//   - the driver's pool keeps freed memory reserved until TrimPool (or a
//     synchronization above the limit SetPoolLimit sets): call
//     TrimPool(0) before another library of the process needs it.
//
// On a CUDA GPU that reports memory pools the pool is the driver's
// stream-ordered allocator (a pool of ompalloc's own, so that TrimPool
// never takes memory from another library's use of the default pool;
// PeerAccess grants peers access to it); elsewhere a size-class cache
// that keeps at most an eighth of the device's memory in free blocks.
// MemoryStats().Pool, SetPoolLimit and TrimPool work on either. No driver call is
// made under the pool's lock.
//
// # Generic and vendor parts
//
// A Device holds its plugin.Impl, a registry of the host ranges locked for
// it or allocated by it as host-pinned memory (Device.Registry: a read-only
// view), a staging pool and its open queues. Argument checks, the registry (lock references, the
// one-step pinned path of transfers, LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS),
// staging, the bounce between two accelerators and queue bookkeeping live
// here; the Impl only allocates, locks, copies and runs queues.
//
// # Staging buffers
//
// A small asynchronous host→device copy from pageable memory (at most
// StagingConfig.Threshold bytes, 64 KiB by default) goes through a pinned
// staging buffer, so the driver takes its fast pinned path and the caller
// may reuse its memory at once. A buffer moves through four states:
//
//	free in the pool ──a copy takes it──▶ filled (the bytes are copied in)
//	filled ──the async copy reading it is issued──▶ in flight on the queue
//	in flight ──Synchronize, or a Query that finds the queue idle──▶ recycled
//	                                   (back in the pool, or freed if full)
//	any state ──Shutdown──▶ freed
//
// A buffer joins its queue only after its copy has been issued, and a query
// and the recycling it allows happen under the queue's lock: a query cannot
// see a buffer whose copy it has not seen. When the pool has no buffer of
// the size class (powers of two from 256 bytes), the submission first asks
// its queue whether its own buffers are done (one driver query per miss, none
// per hit), then allocates a new one (Impl.Alloc of host memory); if that
// fails the copy is submitted unstaged — staging is an optimisation, never
// an error. The pool keeps at most StagingConfig.MaxPoolBytes of free
// buffers; Shutdown frees every buffer, in the pool or held by a queue.
//
// # Environment
//
// Read once, at discovery: OMP_DEFAULT_DEVICE (OpenMP's default-device-var:
// a device number, or "initial" for the host); OMPALLOC_STAGING_THRESHOLD
// and OMPALLOC_STAGING_POOL (StagingConfig's Threshold and MaxPoolBytes, in
// bytes or with a K, M, G or T suffix; a threshold of 0 turns staging off);
// LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS, LLVM's switch for locking pageable
// host buffers while they are transferred: off (the default), on (failures
// ignored) or mandatory. A bad value warns once and gets the default.
package target
