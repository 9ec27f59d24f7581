package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/loader"
)

// Spec finds the driver library.
var Spec = dl.Spec{
	Name:       "CUDA driver",
	Candidates: []string{"libcuda.so.1", "libcuda.so"},
	EnvPath:    "OMPALLOC_CUDA_LIBRARY",
	EnvDisable: "OMPALLOC_DISABLE_CUDA",
}

// Flags and enumerations of the driver API (cuda.h).
const (
	cuMemHostAllocPortable     = 0x01
	cuMemHostAllocDeviceMap    = 0x02
	cuMemHostRegisterPortable  = 0x01
	cuMemHostRegisterDeviceMap = 0x02
	cuMemAttachGlobal          = 0x01
	cuStreamNonBlocking        = 0x01
	cuEventDisableTiming       = 0x02

	cuDeviceAttributeComputeCapabilityMajor = 75
	cuDeviceAttributeComputeCapabilityMinor = 76

	cuPointerAttributeMemoryType     = 2
	cuPointerAttributeDevicePointer  = 3
	cuPointerAttributeRangeStartAddr = 11
	cuPointerAttributeRangeSize      = 12
	cuMemoryTypeHost                 = 1
)

// driver is the bound symbol table of one loaded libcuda, and the state that
// is process-wide in CUDA (host registrations).
type driver struct {
	lib *dl.Library

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                            uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem, cuDeviceGetAttribute  uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxPushCurrent, cuCtxPopCurrent  uintptr
	cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost, cuMemAllocManaged                 uintptr
	cuMemHostRegister, cuMemHostUnregister, cuMemHostGetDevicePointer                       uintptr
	cuPointerGetAttribute                                                                   uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                                 uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamQuery                     uintptr
	cuEventCreate, cuEventRecord, cuEventQuery, cuEventSynchronize, cuEventDestroy          uintptr
	cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess, cuMemcpyPeerAsync uintptr
	cuDeviceGetPCIBusId, cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxSetFlags             uintptr

	tensorSyms                // events between queues (tensor.go)
	poolSyms                  // the stream-ordered allocator (mempool.go)
	infoSyms                  // the device-memory figures (meminfo.go)
	regs       *registrations // the process's registrations through this library (lock.go)

	// Entry points only the module's tools call, through Binding.
	tools struct {
		cuMemAllocHost, cuCtxSetCurrent, cuCtxGetCurrent, cuCtxCreate, cuCtxDestroy, cuMemcpyHtoD, cuMemcpyDtoH uintptr
	}
}

// entry is one symbol of the table. strict: the _v2 symbol is required
// because the unversioned one has another ABI (32-bit CUdeviceptr or sizes),
// so a library lacking _v2 must fail rather than bind the old entry point.
type entry struct {
	dl.Symbol
	strict bool
}

var v2 = []string{"_v2"}

// table lists every symbol the plugin binds, with where it goes.
func (d *driver) table() []entry {
	req := func(name string, addr *uintptr) entry { return entry{Symbol: dl.Symbol{Name: name, Addr: addr}} }
	opt := func(name string, addr *uintptr) entry {
		return entry{Symbol: dl.Symbol{Name: name, Addr: addr, Optional: true}}
	}
	ver := func(e entry) entry { e.Versions = v2; e.strict = true; return e }
	return append([]entry{
		req("cuInit", &d.cuInit),
		req("cuDriverGetVersion", &d.cuDriverGetVersion),
		req("cuGetErrorName", &d.cuGetErrorName),
		opt("cuGetErrorString", &d.cuGetErrorString),
		req("cuDeviceGetCount", &d.cuDeviceGetCount),
		req("cuDeviceGet", &d.cuDeviceGet),
		req("cuDeviceGetName", &d.cuDeviceGetName),
		ver(req("cuDeviceTotalMem", &d.cuDeviceTotalMem)),
		req("cuDeviceGetAttribute", &d.cuDeviceGetAttribute),
		req("cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain),
		ver(req("cuDevicePrimaryCtxRelease", &d.cuDevicePrimaryCtxRelease)),
		ver(req("cuCtxPushCurrent", &d.cuCtxPushCurrent)),
		ver(req("cuCtxPopCurrent", &d.cuCtxPopCurrent)),
		ver(req("cuMemAlloc", &d.cuMemAlloc)),
		ver(req("cuMemFree", &d.cuMemFree)),
		req("cuMemHostAlloc", &d.cuMemHostAlloc),
		req("cuMemFreeHost", &d.cuMemFreeHost),
		opt("cuMemAllocManaged", &d.cuMemAllocManaged),
		ver(req("cuMemHostRegister", &d.cuMemHostRegister)),
		req("cuMemHostUnregister", &d.cuMemHostUnregister),
		ver(req("cuMemHostGetDevicePointer", &d.cuMemHostGetDevicePointer)),
		req("cuPointerGetAttribute", &d.cuPointerGetAttribute),
		ver(req("cuMemcpyHtoDAsync", &d.cuMemcpyHtoDAsync)),
		ver(req("cuMemcpyDtoHAsync", &d.cuMemcpyDtoHAsync)),
		ver(req("cuMemcpyDtoDAsync", &d.cuMemcpyDtoDAsync)),
		req("cuStreamCreate", &d.cuStreamCreate),
		ver(req("cuStreamDestroy", &d.cuStreamDestroy)),
		req("cuStreamSynchronize", &d.cuStreamSynchronize),
		req("cuStreamQuery", &d.cuStreamQuery),
		opt("cuEventCreate", &d.cuEventCreate),
		opt("cuEventRecord", &d.cuEventRecord),
		opt("cuEventQuery", &d.cuEventQuery),
		opt("cuEventSynchronize", &d.cuEventSynchronize),
		ver(opt("cuEventDestroy", &d.cuEventDestroy)),
		opt("cuDeviceCanAccessPeer", &d.cuDeviceCanAccessPeer),
		opt("cuCtxEnablePeerAccess", &d.cuCtxEnablePeerAccess),
		opt("cuCtxDisablePeerAccess", &d.cuCtxDisablePeerAccess),
		opt("cuMemcpyPeerAsync", &d.cuMemcpyPeerAsync),
		opt("cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId), // only for the device's NUMA node
		opt("cuDevicePrimaryCtxGetState", &d.cuDevicePrimaryCtxGetState),
		ver(opt("cuDevicePrimaryCtxSetFlags", &d.cuDevicePrimaryCtxSetFlags)), // the v1 refuses an active context
		// Only the module's tools call these (Binding: the bench's driver
		// peak, the GPU probe); the plugin never does.
		ver(opt("cuMemAllocHost", &d.tools.cuMemAllocHost)),
		opt("cuCtxSetCurrent", &d.tools.cuCtxSetCurrent),
		opt("cuCtxGetCurrent", &d.tools.cuCtxGetCurrent),
		ver(opt("cuCtxCreate", &d.tools.cuCtxCreate)),
		ver(opt("cuCtxDestroy", &d.tools.cuCtxDestroy)),
		ver(opt("cuMemcpyHtoD", &d.tools.cuMemcpyHtoD)),
		ver(opt("cuMemcpyDtoH", &d.tools.cuMemcpyDtoH)),
	}, append(append(d.tensorTable(opt), d.poolTable(opt)...), d.infoTable(opt)...)...)
}

// bind resolves the table in lib. A versioned symbol must bind to its _v2
// name when marked strict; optional ones may be absent.
func bind(lib *dl.Library) (*driver, error) {
	d := &driver{lib: lib}
	table := d.table()
	syms := make([]dl.Symbol, len(table))
	for i, e := range table {
		syms[i] = e.Symbol
	}
	if err := lib.Bind(syms); err != nil {
		return nil, err
	}
	var missing []error
	for _, e := range table {
		if !e.strict || *e.Addr == 0 {
			continue
		}
		name := e.Name + e.Versions[0]
		if p, err := lib.Sym(name); err != nil || p != *e.Addr {
			if e.Optional {
				*e.Addr = 0
				continue
			}
			missing = append(missing, fmt.Errorf("%s in %s (the unversioned %s has another ABI): %w",
				name, lib.Path, e.Name, loader.ErrSymbolMissing))
		}
	}
	if len(missing) > 0 {
		return nil, errors.Join(missing...)
	}
	d.regs = newRegistrations()
	return d, nil
}

// lazyDriver opens and binds a library once, caching absence.
type lazyDriver struct {
	lazy dl.Lazy
	once sync.Once
	drv  *driver
	err  error
}

func (z *lazyDriver) get() (*driver, error) {
	z.once.Do(func() {
		lib, err := z.lazy.Get()
		if err != nil {
			z.err = err
			return
		}
		z.drv, z.err = bind(lib)
	})
	return z.drv, z.err
}

// defaultDriver is the library every New() plugin shares: one per process,
// as the driver's own state is.
var defaultDriver = &lazyDriver{lazy: dl.Lazy{Spec: Spec}}

// result is a CUresult.
type result int32

// call calls a driver function. Its arguments may be Go pointers converted
// to uintptr in the call expression: uintptrescapes moves what they point to
// to the heap (which does not move) and keeps it alive for the call, so the
// driver may write results there.
//
//go:uintptrescapes
//go:noinline
func call(fn uintptr, args ...uintptr) result {
	return result(int32(dlcall.Call(fn, args...)))
}

// check turns a CUresult into nil or an *Error naming call.
func (d *driver) check(name string, r result) error {
	if r == cudaSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(r), Name: d.errorName(int(r))}
}

// errorName asks the driver for the name of code, falling back to the names
// known here.
func (d *driver) errorName(code int) string {
	var s uintptr
	if d != nil && d.cuGetErrorName != 0 {
		if call(d.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&s))) == cudaSuccess && s != 0 {
			return cString(s, 128)
		}
	}
	return staticName(code)
}

// cString reads the NUL-terminated C string at p, at most max bytes.
func cString(p uintptr, max int) string {
	b := make([]byte, 0, 64)
	for i := 0; i < max; i++ {
		c := *(*byte)(cmem.Ptr(p + uintptr(i)))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// version returns the driver's version as "major.minor" (12020 → "12.2").
func (d *driver) version() (string, error) {
	v, err := d.versionNumber()
	if err != nil {
		return "", err
	}
	return versionString(v), nil
}

// versionNumber is cuDriverGetVersion's answer (12020 for CUDA 12.2).
func (d *driver) versionNumber() (int32, error) {
	var v int32
	err := d.check("cuDriverGetVersion", call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return v, err
}
