package kmp

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/target"
)

// The target part of omp.h and LLVM's extensions. Devices are numbered as
// in OpenMP: accelerators 0..GetNumDevices()-1, then the host, the initial
// device, which every call accepts, also as InitialDevice
// (omp_initial_device, devnum.go). Bad input (a nil pointer, a zero size,
// an unknown device, InvalidDevice, unlocking what is not locked) gives
// nil, nothing, or a non-zero result and one warning line; it never aborts
// the process as libomptarget does for a bad device number.

// GetNumDevices is omp_get_num_devices: the number of accelerators.
func GetNumDevices() int { return target.NumDevices() }

// GetInitialDevice is omp_get_initial_device: the host's device number,
// GetNumDevices().
func GetInitialDevice() int { return target.InitialDevice() }

// GetDefaultDevice is omp_get_default_device.
func GetDefaultDevice() int { return target.DefaultDevice() }

// SetDefaultDevice is omp_set_default_device. InitialDevice makes the host
// the default (GetDefaultDevice then returns GetInitialDevice()). An
// invalid number leaves the default unchanged.
func SetDefaultDevice(device int) {
	device, ok := devArg("omp_set_default_device", device)
	if !ok {
		return
	}
	if err := target.SetDefaultDevice(device); err != nil {
		warnf("omp_set_default_device: %v; the default device stays %d", err, target.DefaultDevice())
	}
}

// lookupDevice returns device dev (an OpenMP device number:
// InitialDevice is the host), or warns on behalf of fn and returns nil.
func lookupDevice(fn string, dev int) *target.Device {
	dev, ok := devArg(fn, dev)
	if !ok {
		return nil
	}
	d, err := target.Get(dev)
	if err != nil {
		warnf("%s: %v", fn, err)
		return nil
	}
	return d
}

// TargetLockMem is llvm_omp_target_lock_mem: it page-locks [ptr, ptr+size)
// for device and returns the address the device uses for ptr, or nil. A
// range inside one already locked only adds a reference; each lock needs
// its TargetUnlockMem. Go heap memory may be locked only while something
// keeps it alive; memory from Alloc or mmap is the usual choice.
func TargetLockMem(ptr unsafe.Pointer, size uintptr, device int) unsafe.Pointer {
	const fn = "llvm_omp_target_lock_mem"
	d := lookupDevice(fn, device)
	switch {
	case d == nil:
		return nil
	case ptr == nil:
		warnf("%s: nil pointer", fn)
		return nil
	case size == 0:
		warnf("%s: size 0 at %p", fn, ptr)
		return nil
	}
	dev, err := d.LockMem(uintptr(ptr), size)
	if err != nil {
		warnf("%s: %v", fn, err)
		return nil
	}
	return cmem.Ptr(dev)
}

// TargetUnlockMem is llvm_omp_target_unlock_mem: it drops one lock
// reference of the range holding ptr (any pointer inside it); the last one
// unlocks the memory.
func TargetUnlockMem(ptr unsafe.Pointer, device int) {
	const fn = "llvm_omp_target_unlock_mem"
	d := lookupDevice(fn, device)
	if d == nil {
		return
	}
	if ptr == nil {
		warnf("%s: nil pointer", fn)
		return
	}
	if err := d.UnlockMem(uintptr(ptr)); err != nil {
		warnf("%s: %v", fn, err)
	}
}

func targetAlloc(fn string, kind target.MemKind, size uintptr, device int) unsafe.Pointer {
	d := lookupDevice(fn, device)
	if d == nil {
		return nil
	}
	if size == 0 {
		warnf("%s: size 0", fn)
		return nil
	}
	var p uintptr
	var err error
	if kind == target.MemDevice && !d.IsHost() {
		// Device memory comes from the device's caching pool (CUDA's
		// stream-ordered allocator where the GPU has memory pools, else a
		// size-class cache): it saves the cuMemAlloc/
		// hsa_amd_memory_pool_allocate and its device sync; a failure is
		// the driver's.
		p, err = d.PoolAlloc(size, nil)
	} else {
		p, err = d.Alloc(kind, size)
	}
	if err != nil {
		warnf("%s: %v", fn, err)
		return nil
	}
	targetSizes.Store(targetKey{d, p}, size)
	return cmem.Ptr(p)
}

// targetSizes remembers the size of every block the TargetAlloc functions
// returned, so that TargetMemcpy can check copies against it.
var targetSizes sync.Map // targetKey → uintptr

type targetKey struct {
	d *target.Device
	p uintptr
}

// targetFree frees ptr; kind < 0 accepts any kind (omp_target_free). A nil
// ptr does nothing, as free(NULL).
func targetFree(fn string, kind target.MemKind, ptr unsafe.Pointer, device int) {
	if ptr == nil {
		if _, err := deviceNum(device); err != nil {
			warnf("%s: %v", fn, err) // as for any pointer
		}
		return
	}
	d := lookupDevice(fn, device)
	if d == nil {
		return
	}
	p := uintptr(ptr)
	if (kind < 0 || kind == target.MemDevice) && d.PoolFree(p, nil) == nil {
		// A block of the device's pool goes back to it. PoolFree refuses
		// (and changes nothing for) any pointer the pool did not hand
		// out: those reach the driver below, as before.
		targetSizes.Delete(targetKey{d, p})
		return
	}
	if kind < 0 {
		k, ok := d.Kind(p)
		if !ok {
			warnf("%s: %p was not allocated by device %d (or was freed)", fn, ptr, d.ID)
			return
		}
		kind = k
	}
	if err := d.Free(kind, p); err != nil {
		warnf("%s: %v", fn, err)
		return
	}
	targetSizes.Delete(targetKey{d, p})
}

// TargetAlloc is omp_target_alloc: n bytes of device memory (host memory
// on the initial device), served from the device's caching pool
// (target.Device.PoolAlloc): TargetFree returns it there, and
// target.Device.TrimPool gives cached blocks back to the driver.
func TargetAlloc(size uintptr, device int) unsafe.Pointer {
	return targetAlloc("omp_target_alloc", target.MemDevice, size, device)
}

// TargetFree is omp_target_free: it frees memory from any of the
// TargetAlloc functions of the same device.
func TargetFree(ptr unsafe.Pointer, device int) { targetFree("omp_target_free", -1, ptr, device) }

// TargetAllocHost is llvm_omp_target_alloc_host: pinned host memory the
// device can access (mlock'ed on the initial device), registered as pinned.
func TargetAllocHost(size uintptr, device int) unsafe.Pointer {
	return targetAlloc("llvm_omp_target_alloc_host", target.MemHost, size, device)
}

// TargetFreeHost is llvm_omp_target_free_host.
func TargetFreeHost(ptr unsafe.Pointer, device int) {
	targetFree("llvm_omp_target_free_host", target.MemHost, ptr, device)
}

// TargetAllocShared is llvm_omp_target_alloc_shared: memory that migrates
// between host and device.
func TargetAllocShared(size uintptr, device int) unsafe.Pointer {
	return targetAlloc("llvm_omp_target_alloc_shared", target.MemShared, size, device)
}

// TargetFreeShared is llvm_omp_target_free_shared.
func TargetFreeShared(ptr unsafe.Pointer, device int) {
	targetFree("llvm_omp_target_free_shared", target.MemShared, ptr, device)
}

// TargetAllocDevice is llvm_omp_target_alloc_device: device memory from
// the device's caching pool, as TargetAlloc.
func TargetAllocDevice(size uintptr, device int) unsafe.Pointer {
	return targetAlloc("llvm_omp_target_alloc_device", target.MemDevice, size, device)
}

// TargetFreeDevice is llvm_omp_target_free_device.
func TargetFreeDevice(ptr unsafe.Pointer, device int) {
	targetFree("llvm_omp_target_free_device", target.MemDevice, ptr, device)
}

// TargetMemcpy is omp_target_memcpy: it copies length bytes from src +
// srcOffset on srcDevice to dst + dstOffset on dstDevice, between any two
// devices including the host, and returns 0 on success. A zero length does
// nothing and succeeds, as in libomptarget. Where dst or src is memory this
// runtime knows (a block of an allocator, a TargetAlloc block, a range
// locked or registered for the device), a copy running past its end is a
// warning and -1 instead of a fault; other memory is the caller's to get
// right, as in C.
func TargetMemcpy(dst, src unsafe.Pointer, length, dstOffset, srcOffset uintptr, dstDevice, srcDevice int) int {
	const fn = "omp_target_memcpy"
	dstDevice, srcDevice, ok := devArgs(fn, dstDevice, srcDevice)
	if !ok {
		return -1
	}
	if length == 0 {
		return 0
	}
	if dst == nil || src == nil {
		warnf("%s: nil pointer (dst %p, src %p) for %d bytes", fn, dst, src, length)
		return -1
	}
	d, s := uintptr(dst), uintptr(src)
	if d+dstOffset < d || s+srcOffset < s {
		warnf("%s: offset wraps around the address space (dst %p+%d, src %p+%d)", fn, dst, dstOffset, src, srcOffset)
		return -1
	}
	if err := checkBounds("destination", d, dstOffset, length, dstDevice); err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	if err := checkBounds("source", s, srcOffset, length, srcDevice); err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	if err := target.Memcpy(d+dstOffset, s+srcOffset, length, dstDevice, srcDevice); err != nil {
		warnf("%s: %v", fn, err)
		return -1
	}
	return 0
}

// errOutOfBounds: a copy runs past the end of memory the runtime knows.
var errOutOfBounds = errors.New("out of bounds")

// checkBounds checks [base+off, base+off+n) against what the runtime knows
// of the memory at base on device dev: base may point anywhere inside it.
func checkBounds(which string, base, off, n uintptr, dev int) error {
	start, size, what, ok := knownRange(base, dev)
	if !ok {
		return nil
	}
	if room := start + size - base; off <= room && n <= room-off {
		return nil
	}
	return fmt.Errorf("%s %#x+%d: %w: %d bytes run past the end of %s of %d bytes at %#x", which, base, off, errOutOfBounds, n, what, size, start)
}

// knownRange returns the memory the runtime knows that holds base
// ([start, start+size)), and what that memory is.
func knownRange(base uintptr, dev int) (start, size uintptr, what string, ok bool) {
	if info, err := alloc.Inspect(cmem.Ptr(base)); err == nil {
		n := info.Size
		return base, n, "the allocator block", true
	}
	if start, n, ok := ompglue.Containing(cmem.Ptr(base)); ok {
		return uintptr(start), n, "the allocator block", true // base is inside it
	}
	d, err := target.Get(dev)
	if err != nil {
		return 0, 0, "", false // Memcpy names the bad device
	}
	if v, ok := targetSizes.Load(targetKey{d, base}); ok {
		return base, v.(uintptr), "the omp_target_alloc block", true
	}
	if e, ok := d.Registry().Entry(base); ok {
		return e.Host, e.Size, "the " + e.Kind.String() + " range", true
	}
	return 0, 0, "", false
}
