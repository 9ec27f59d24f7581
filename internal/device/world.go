package device

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/plugin/host"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// World is the outcome of one discovery: the devices, accelerators then
// the host, and each plugin's status. Shutdown ends it; the next use
// discovers a new one.
type World struct {
	devices []*Device
	plugins []plugin.Status
	def     atomic.Int64 // the default device
}

var (
	worldMu sync.Mutex
	current atomic.Pointer[World]
)

// Discover returns the current world, discovering the devices at first use.
// Discovery runs once; Shutdown starts over.
func Discover() *World {
	if w := current.Load(); w != nil {
		return w
	}
	worldMu.Lock()
	defer worldMu.Unlock()
	if w := current.Load(); w != nil {
		return w
	}
	w := discover()
	current.Store(w)
	return w
}

// Current returns the current world without discovering one: nil before
// the first use and after Shutdown.
func Current() *World { return current.Load() }

func discover() *World {
	w := &World{}
	for _, v := range vendorList() {
		p := v.New()
		err := initPlugin(p)
		w.plugins = append(w.plugins, status(p, err))
		if err != nil {
			continue // a plugin whose Init fails contributes no devices
		}
		for _, impl := range p.Devices() {
			w.devices = append(w.devices, newDevice(len(w.devices), impl, p.Name(), false))
		}
	}
	hp := host.New()
	err := initPlugin(hp)
	w.plugins = append(w.plugins, status(hp, err))
	// The host is always there, even when its plugin reports a problem: its
	// operations then fail with the reason.
	if devs := hp.Devices(); len(devs) > 0 {
		w.devices = append(w.devices, newDevice(len(w.devices), devs[0], hp.Name(), true))
	}
	w.def.Store(int64(EnvDefault(len(w.devices) - 1)))
	return w
}

// initPlugin runs Init, turning a panic in a driver binding into an error:
// a broken driver must cost its devices, not the process.
func initPlugin(p plugin.Plugin) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s plugin: init panicked: %v", p.Name(), r)
		}
	}()
	return p.Init()
}

func status(p plugin.Plugin, err error) plugin.Status {
	s := p.Status()
	if s.Plugin == "" {
		s.Plugin = p.Name()
	}
	if s.Err == nil && err != nil {
		s.Err = err
		if s.Init == "" {
			s.Init = err.Error()
		}
	}
	return s
}

// EnvDefault reads OMP_DEFAULT_DEVICE against the initial device's number.
func EnvDefault(initial int) int {
	v, ok := envvar.Lookup(envvar.DefaultDevice)
	if !ok {
		return 0
	}
	if strings.EqualFold(v, "initial") {
		return initial
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > initial {
		warn.Printf(warn.Env, "target", "%s=%q: %s; using %s", envvar.DefaultDevice, v, fmt.Sprintf("not a device number in 0..%d", initial), "0")
		return 0
	}
	return n
}

// Devices returns the world's devices: accelerators in order, then the host.
// The slice is the world's own: do not modify it.
func (w *World) Devices() []*Device { return w.devices }

// Plugins reports each plugin's driver status, accelerators first, the host
// last, whether or not it contributed devices.
func (w *World) Plugins() []plugin.Status { return append([]plugin.Status(nil), w.plugins...) }

// Get returns device dev of w; the initial device is valid too.
func (w *World) Get(dev int) (*Device, error) {
	if dev < 0 || dev >= len(w.devices) {
		return nil, badDevice(dev, len(w.devices)-1)
	}
	return w.devices[dev], nil
}

// Default is the device used when none is named.
func (w *World) Default() int { return int(w.def.Load()) }

// SetDefault sets the default device; it must be valid.
func (w *World) SetDefault(dev int) error {
	if _, err := w.Get(dev); err != nil {
		return err
	}
	w.def.Store(int64(dev))
	return nil
}

func badDevice(dev, initial int) error {
	if initial == 0 {
		return fmt.Errorf("device %d: %w (the only device is 0, the host)", dev, ErrBadDevice)
	}
	return fmt.Errorf("device %d: %w (valid: 0..%d, %d is the host)", dev, ErrBadDevice, initial, initial)
}

// Get returns device dev, discovering the devices at first use.
func Get(dev int) (*Device, error) { return Discover().Get(dev) }

// NumDevices is the number of accelerators (omp_get_num_devices); the host
// is not counted.
func NumDevices() int { return len(Discover().devices) - 1 }

// DefaultDevice is the device used when none is named: 0 unless
// OMP_DEFAULT_DEVICE or SetDefault says otherwise.
func DefaultDevice() int { return Discover().Default() }

// SharedPinned reports whether a device of plugin has host memory at p or
// at p+n-1 in its registry (a block that merely holds a pinned range
// inside, touching neither end, is not looked for: pinned heaps' blocks lie
// in pinned chunks). A vendor pins for all of its devices at once (CUDA
// registers PORTABLE, HSA locks for every GPU agent), so memory one device
// pinned is pinned for every device of its plugin. Lock-free lookups; no
// driver call.
func SharedPinned(pluginName string, p, n uintptr) bool {
	w := current.Load()
	if w == nil {
		return false
	}
	for _, o := range w.devices {
		if o.host || o.plugin != pluginName {
			continue
		}
		if _, ok := o.reg.Lookup(p); ok {
			return true
		}
		if _, ok := o.reg.Lookup(p + n - 1); ok {
			return true
		}
	}
	return false
}

func joinErrs(errs []error) error { return errors.Join(errs...) }
