package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/loader"
)

// New returns the CUDA plugin. Nothing is loaded until Init.
func New() plugin.Plugin { return newPlugin(defaultDriver) }

func newPlugin(z *lazyDriver) *cudaPlugin { return &cudaPlugin{z: z} }

type cudaPlugin struct {
	z *lazyDriver

	once    sync.Once
	mu      sync.Mutex
	drv     *driver
	version string
	initRes string // the init result by name, or why there is no driver
	err     error
	devices []*device
}

func (p *cudaPlugin) Name() string { return "cuda" }

// Init loads and binds the driver, calls cuInit and describes every
// device, once; later calls return the first result. It retains no
// context: devices open at first use (device.Open). A missing or disabled library
// gives an error wrapping loader.ErrNotFound or loader.ErrDisabled; a failed
// cuInit one wrapping loader.ErrInitFailed and the *Error, which names the
// code (CUDA_ERROR_NO_DEVICE on a machine without a GPU).
func (p *cudaPlugin) Init() error {
	p.once.Do(func() {
		devs, err := p.init()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.devices, p.err = devs, err
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *cudaPlugin) init() ([]*device, error) {
	drv, err := p.z.get()
	if err != nil {
		p.setStatus(nil, "", whyNone(err))
		return nil, err
	}
	// cuDriverGetVersion needs no cuInit: "This function automatically
	// returns CUDA_ERROR_INVALID_VALUE if the driverVersion argument is
	// NULL" is its only failure.
	v, verr := drv.versionNumber()
	ver := ""
	if verr == nil {
		ver = versionString(v)
	}
	if verr == nil && v < minVersion {
		p.setStatus(drv, ver, fmt.Sprintf("driver too old: CUDA %s", ver))
		return nil, fmt.Errorf("%s %s: %w: %w: CUDA %s, ompalloc needs %s or later", Spec.Name, drv.lib.Path,
			loader.ErrInitFailed, errTooOld, ver, versionString(minVersion))
	}
	if err := drv.check("cuInit", call(drv.cuInit, 0)); err != nil {
		p.setStatus(drv, ver, nameOf(err))
		return nil, fmt.Errorf("%s %s: %w: %w", Spec.Name, drv.lib.Path, loader.ErrInitFailed, err)
	}
	p.setStatus(drv, ver, "CUDA_SUCCESS")
	var n int32
	if err := drv.check("cuDeviceGetCount", call(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	// Discovery describes the devices and opens none: each is opened at its
	// first use, and one that cannot be opened stays listed, failing alone.
	devs := make([]*device, 0, n)
	for i := 0; i < int(n); i++ {
		devs = append(devs, discoverDevice(drv, i, ver))
	}
	return devs, nil
}

func (p *cudaPlugin) setStatus(drv *driver, ver, res string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drv, p.version, p.initRes = drv, ver, res
}

// whyNone says why there is no library, starting with the kind of reason.
func whyNone(err error) string {
	switch {
	case errors.Is(err, loader.ErrDisabled):
		return "disabled: " + err.Error()
	case errors.Is(err, loader.ErrNotFound):
		return "not found: " + err.Error()
	case errors.Is(err, loader.ErrSymbolMissing):
		return "symbol missing: " + err.Error()
	}
	return err.Error()
}

// nameOf is the driver's name of a failed call's code.
func nameOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Name
	}
	return err.Error()
}

func (p *cudaPlugin) Status() plugin.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := plugin.Status{Plugin: "cuda", Version: p.version, Init: p.initRes, Err: p.err, Advice: advice(p.err)}
	if p.drv != nil {
		s.Library = p.drv.lib.Path
	}
	if p.initRes == "" {
		s.Init, s.Err = "Init not called", ErrInitNotCalled
	}
	return s
}

// Devices returns the devices Init found, in CUDA ordinal order, also those
// that cannot be opened; none before Init or when it failed.
func (p *cudaPlugin) Devices() []plugin.Impl {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]plugin.Impl, len(p.devices))
	for i, d := range p.devices {
		out[i] = d
	}
	return out
}
