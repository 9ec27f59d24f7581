package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// infoSyms are the optional symbols of the device-memory figures.
type infoSyms struct {
	cuMemGetInfo uintptr // CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
}

func (d *driver) infoTable(opt func(string, *uintptr) entry) []entry {
	e := opt("cuMemGetInfo", &d.cuMemGetInfo)
	e.Versions, e.strict = v2, true // the v1 takes unsigned int pointers
	return []entry{e}
}

// MemInfo is cuMemGetInfo_v2 in the device's primary context: "Returns in
// *total the total amount of memory available to the current context.
// Returns in *free the amount of memory on the device that is free
// according to the OS" (CUDA driver API, Memory Management). The free
// figure is the whole device's, other processes included.
func (d *device) MemInfo() (free, total uint64, err error) {
	if d.drv.cuMemGetInfo == 0 {
		return 0, 0, &plugin.OpError{Dev: d.String(), Op: "memory info", Err: fmt.Errorf("cuMemGetInfo_v2 missing in %s: %w", d.drv.lib.Path, errors.ErrUnsupported)}
	}
	var f, t uintptr
	if err := d.withCtx("cuMemGetInfo", func() result {
		return call(d.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	}); err != nil {
		return 0, 0, &plugin.OpError{Dev: d.String(), Op: "memory info", Err: err}
	}
	return uint64(f), uint64(t), nil
}
