package main

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/plugin/cuda"
)

// peakSeries is the transfer series measured straight through the driver,
// without ompalloc in the way: the yardstick of the others.
const peakSeries = "driver peak"

// cudaPeak measures what the CUDA driver itself reaches: a buffer from
// cuMemAllocHost copied with cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on a
// stream of its own, synchronized after each copy, as a CUDA program that
// owns its pinned memory would. It calls the entry points internal/plugin/cuda
// bound (cuda.Bound: the same library, the same symbol table) and works in
// the primary context of the device (where internal/plugin/cuda allocated the
// device buffer), retained for its own use. Like internal/plugin/cuda it borrows the thread with
// cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2, so the caller's context stack is
// as it was afterwards.
type cudaPeak struct {
	drv                                                                                        *cuda.Binding
	push, pop, release, allocHost, freeHost, streamCreate, streamDestroy, streamSync, h2d, d2h uintptr

	cudev                int32 // CUdevice
	ctx, stream, host, n uintptr
}

// CUDA driver API values (cuda.h).
const cuStreamNonBlocking = 1

// newCUDAPeak allocates n pinned bytes through the driver for copies with a
// device buffer of CUDA device ord (its OpenMP number: CUDA's come first),
// on NUMA node node (-1: wherever the driver puts them).
func newCUDAPeak(ord int, n uintptr, node int) (*cudaPeak, error) {
	drv, err := cuda.Bound()
	if err != nil {
		return nil, err
	}
	p := &cudaPeak{drv: drv, n: n}
	var devGet, retain uintptr
	for _, s := range []struct {
		name string
		addr *uintptr
	}{
		{"cuDeviceGet", &devGet}, {"cuDevicePrimaryCtxRetain", &retain}, {"cuDevicePrimaryCtxRelease_v2", &p.release},
		{"cuCtxPushCurrent_v2", &p.push}, {"cuCtxPopCurrent_v2", &p.pop},
		{"cuMemAllocHost_v2", &p.allocHost}, {"cuMemFreeHost", &p.freeHost},
		{"cuStreamCreate", &p.streamCreate}, {"cuStreamDestroy_v2", &p.streamDestroy},
		{"cuStreamSynchronize", &p.streamSync}, {"cuMemcpyHtoDAsync_v2", &p.h2d},
		{"cuMemcpyDtoHAsync_v2", &p.d2h},
	} {
		if *s.addr, err = drv.Sym(s.name); err != nil {
			return nil, err
		}
	}
	if err := p.check("cuDeviceGet", dlcall.Call(devGet, uintptr(unsafe.Pointer(&p.cudev)), uintptr(ord))); err != nil {
		return nil, err
	}
	if err := p.check("cuDevicePrimaryCtxRetain", dlcall.Call(retain, uintptr(unsafe.Pointer(&p.ctx)), uintptr(p.cudev))); err != nil {
		return nil, err
	}
	err = p.inCtx(func() error {
		if err := p.check("cuStreamCreate", dlcall.Call(p.streamCreate, uintptr(unsafe.Pointer(&p.stream)), cuStreamNonBlocking)); err != nil {
			return err
		}
		// cuMemAllocHost gives no address to mbind first: the driver
		// allocates the pages in the call, for this (locked) thread, so the
		// thread's policy places them (the device's node, like every other
		// series' buffer).
		var restore func() error
		if node >= 0 && numa.Supported() {
			restore, _ = numa.SetThreadPolicy(numa.ModePreferred, []int{node})
		}
		err := p.check("cuMemAllocHost", dlcall.Call(p.allocHost, uintptr(unsafe.Pointer(&p.host)), n))
		if restore != nil {
			_ = restore()
		}
		return err
	})
	if err != nil {
		_ = p.close()
		return nil, err
	}
	touch(p.host, n)
	return p, nil
}

// inCtx runs f with the peak's context current on a locked thread, pushed
// before and popped after.
func (p *cudaPeak) inCtx(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.check("cuCtxPushCurrent", dlcall.Call(p.push, p.ctx)); err != nil {
		return err
	}
	err := f()
	var popped uintptr
	return errors.Join(err, p.check("cuCtxPopCurrent", dlcall.Call(p.pop, uintptr(unsafe.Pointer(&popped)))))
}

// check names a failed driver call by the driver's own name for the code.
func (p *cudaPeak) check(call string, r uintptr) error {
	if code := int32(r); code != 0 {
		return fmt.Errorf("%s: %s", call, p.drv.ErrorName(int(code)))
	}
	return nil
}

// copies runs k copies of size bytes in direction group ("h2d", "d2h")
// between the driver's pinned buffer and dev, each waited for.
func (p *cudaPeak) copies(group string, dev, size uintptr, k int) error {
	if size > p.n {
		return fmt.Errorf("%d bytes: the driver's buffer has %d", size, p.n)
	}
	return p.inCtx(func() error {
		for range k {
			var err error
			if group == "h2d" {
				err = p.check("cuMemcpyHtoDAsync", dlcall.Call(p.h2d, dev, p.host, size, p.stream))
			} else {
				err = p.check("cuMemcpyDtoHAsync", dlcall.Call(p.d2h, p.host, dev, size, p.stream))
			}
			if err == nil {
				err = p.check("cuStreamSynchronize", dlcall.Call(p.streamSync, p.stream))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// close frees what newCUDAPeak took and releases its context reference.
func (p *cudaPeak) close() error {
	if p.ctx == 0 {
		return nil
	}
	err := p.inCtx(func() error {
		var errs []error
		if p.stream != 0 {
			errs = append(errs, p.check("cuStreamDestroy", dlcall.Call(p.streamDestroy, p.stream)))
			p.stream = 0
		}
		if p.host != 0 {
			errs = append(errs, p.check("cuMemFreeHost", dlcall.Call(p.freeHost, p.host)))
			p.host = 0
		}
		return errors.Join(errs...)
	})
	err = errors.Join(err, p.check("cuDevicePrimaryCtxRelease", dlcall.Call(p.release, uintptr(p.cudev))))
	p.ctx = 0
	return err
}
