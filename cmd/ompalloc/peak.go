package main

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/loader"
	"github.com/ompalloc/ompalloc/target/cuda"
)

// peakSeries is the transfer series measured straight through the driver,
// without ompalloc in the way: the yardstick of the others.
const peakSeries = "driver peak"

// cudaPeak measures what the CUDA driver itself reaches: a buffer from
// cuMemAllocHost copied with cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on a
// stream of its own, synchronized after each copy, as a CUDA program that
// owns its pinned memory would. It binds the library target/cuda loaded
// (the same file, so the same handle) and works in the context that owns
// the device buffer, which it asks the driver for.
type cudaPeak struct {
	setCurrent, allocHost, freeHost, streamCreate, streamDestroy, streamSync, h2d, d2h, errName uintptr

	ctx, stream, host, n uintptr
}

// CUDA driver API values (cuda.h).
const (
	cuPointerAttributeContext = 1
	cuStreamNonBlocking       = 1
)

// newCUDAPeak allocates n pinned bytes through the driver for copies with
// the device buffer dev.
func newCUDAPeak(dev, n uintptr) (*cudaPeak, error) {
	lib, err := loader.Open(cuda.Spec)
	if err != nil {
		return nil, err
	}
	p := &cudaPeak{n: n}
	var getAttr uintptr
	for _, s := range []struct {
		name string
		addr *uintptr
	}{
		{"cuPointerGetAttribute", &getAttr}, {"cuCtxSetCurrent", &p.setCurrent},
		{"cuMemAllocHost_v2", &p.allocHost}, {"cuMemFreeHost", &p.freeHost},
		{"cuStreamCreate", &p.streamCreate}, {"cuStreamDestroy_v2", &p.streamDestroy},
		{"cuStreamSynchronize", &p.streamSync}, {"cuMemcpyHtoDAsync_v2", &p.h2d},
		{"cuMemcpyDtoHAsync_v2", &p.d2h}, {"cuGetErrorName", &p.errName},
	} {
		if *s.addr, err = lib.Sym(s.name); err != nil {
			return nil, err
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.check("cuPointerGetAttribute(CONTEXT)",
		loader.Call(getAttr, uintptr(unsafe.Pointer(&p.ctx)), cuPointerAttributeContext, dev)); err != nil {
		return nil, err
	}
	if err := p.check("cuCtxSetCurrent", loader.Call(p.setCurrent, p.ctx)); err != nil {
		return nil, err
	}
	if err := p.check("cuStreamCreate", loader.Call(p.streamCreate, uintptr(unsafe.Pointer(&p.stream)), cuStreamNonBlocking)); err != nil {
		return nil, err
	}
	if err := p.check("cuMemAllocHost", loader.Call(p.allocHost, uintptr(unsafe.Pointer(&p.host)), n)); err != nil {
		p.close()
		return nil, err
	}
	touch(p.host, n)
	return p, nil
}

// check names a failed driver call by the driver's own name for the code.
func (p *cudaPeak) check(call string, r uintptr) error {
	code := int32(r)
	if code == 0 {
		return nil
	}
	name := fmt.Sprintf("CUresult %d", code)
	var s uintptr
	if loader.Call(p.errName, uintptr(code), uintptr(unsafe.Pointer(&s))) == 0 && s != 0 {
		name = cString(s)
	}
	return fmt.Errorf("%s: %s", call, name)
}

// copies runs k copies of size bytes in direction group ("h2d", "d2h")
// between the driver's pinned buffer and dev, each waited for.
func (p *cudaPeak) copies(group string, dev, size uintptr, k int) error {
	if size > p.n {
		return fmt.Errorf("%d bytes: the driver's buffer has %d", size, p.n)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.check("cuCtxSetCurrent", loader.Call(p.setCurrent, p.ctx)); err != nil {
		return err
	}
	for range k {
		var err error
		if group == "h2d" {
			err = p.check("cuMemcpyHtoDAsync", loader.Call(p.h2d, dev, p.host, size, p.stream))
		} else {
			err = p.check("cuMemcpyDtoHAsync", loader.Call(p.d2h, p.host, dev, size, p.stream))
		}
		if err == nil {
			err = p.check("cuStreamSynchronize", loader.Call(p.streamSync, p.stream))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// close frees what newCUDAPeak took.
func (p *cudaPeak) close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var errs []error
	errs = append(errs, p.check("cuCtxSetCurrent", loader.Call(p.setCurrent, p.ctx)))
	if p.stream != 0 {
		errs = append(errs, p.check("cuStreamDestroy", loader.Call(p.streamDestroy, p.stream)))
		p.stream = 0
	}
	if p.host != 0 {
		errs = append(errs, p.check("cuMemFreeHost", loader.Call(p.freeHost, p.host)))
		p.host = 0
	}
	return errors.Join(errs...)
}

// cString reads a NUL-terminated C string (the driver's static names).
func cString(p uintptr) string {
	var b []byte
	for i := uintptr(0); i < 256; i++ {
		c := cmem.Bytes(p+i, 1)[0]
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
