package target

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/plugin/amdgpu"
	"github.com/ompalloc/ompalloc/internal/plugin/cuda"
	"github.com/ompalloc/ompalloc/internal/plugin/host"
)

// accelerators builds the accelerator plugins, in numbering order: their
// devices are 0..n-1, CUDA's first. The host comes after them all.
var accelerators = []func() plugin.Plugin{cuda.New, amdgpu.New}

// hostPlugin builds the host plugin; tests may replace it.
var hostPlugin = host.New

// world is the outcome of discovery: the devices, accelerators then host.
type world struct {
	devices []*Device
	plugins []DriverStatus
	def     atomic.Int64 // the default device
}

var (
	worldMu sync.Mutex
	current atomic.Pointer[world]
)

// get returns the devices, discovering them at first use. Discovery runs
// once; Shutdown starts over.
func get() *world {
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

func discover() *world {
	cfg, mode := readEnv()
	w := &world{}
	for _, mk := range accelerators {
		p := mk()
		err := initPlugin(p)
		w.plugins = append(w.plugins, status(p, err))
		if err != nil {
			continue // a plugin whose Init fails contributes no devices
		}
		for _, impl := range p.Devices() {
			w.devices = append(w.devices, newDevice(len(w.devices), impl, p.Name(), false, cfg, mode))
		}
	}
	hp := hostPlugin()
	err := initPlugin(hp)
	w.plugins = append(w.plugins, status(hp, err))
	// The host is always there, even when its plugin reports a problem: its
	// operations then fail with the reason.
	if devs := hp.Devices(); len(devs) > 0 {
		w.devices = append(w.devices, newDevice(len(w.devices), devs[0], hp.Name(), true, cfg, mode))
	}
	w.def.Store(int64(defaultDevice(len(w.devices) - 1)))
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

func status(p plugin.Plugin, err error) DriverStatus {
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
	return driverError(s) // drivererror.go
}

// NumDevices is the number of accelerators (omp_get_num_devices); the host
// is not counted.
func NumDevices() int { return len(get().devices) - 1 }

// InitialDevice is the host's device number: NumDevices().
func InitialDevice() int { return NumDevices() }

// DefaultDevice is the device used when none is named: 0 unless
// OMP_DEFAULT_DEVICE or SetDefaultDevice says otherwise.
func DefaultDevice() int { return int(get().def.Load()) }

// SetDefaultDevice sets the default device; it must be valid.
func SetDefaultDevice(dev int) error {
	w := get()
	if _, err := w.device(dev); err != nil {
		return err
	}
	w.def.Store(int64(dev))
	return nil
}

// Get returns device dev; the initial device is valid too.
func Get(dev int) (*Device, error) { return get().device(dev) }

func (w *world) device(dev int) (*Device, error) {
	if dev < 0 || dev >= len(w.devices) {
		return nil, withDriverErrors(badDevice(dev, len(w.devices)-1), w.plugins) // drivererror.go
	}
	return w.devices[dev], nil
}

func badDevice(dev, initial int) error {
	if initial == 0 {
		return fmt.Errorf("device %d: %w (the only device is 0, the host)", dev, ErrBadDevice)
	}
	return fmt.Errorf("device %d: %w (valid: 0..%d, %d is the host)", dev, ErrBadDevice, initial, initial)
}

// Devices returns every device: accelerators in order, then the host.
func Devices() []*Device { return append([]*Device(nil), get().devices...) }

// Plugins reports each plugin's driver status, accelerators first, the host
// last, whether or not it contributed devices.
func Plugins() []DriverStatus { return append([]DriverStatus(nil), get().plugins...) }

// Shutdown closes every device: waits for and destroys their queues, frees
// every staging buffer (including those held by queues that never
// completed) and closes the plugins' devices. Devices from before are
// unusable afterwards; the next call of this package discovers anew.
//
// Memory held for live pinned blocks (alloc's pinned chunks) cannot be given up behind
// its owner's back: after the shutdown hooks ran (alloc releases its
// idle pinned chunks), any device still holding some makes Shutdown refuse
// with ErrBusy and change nothing. Ranges locked with LockMem are unlocked
// with their device, and forgotten: the devices discovered next start with
// empty registries.
func Shutdown() error {
	syncQueues() // frees waiting on a queue (alloc.FreeAfter, Queue.OnDone) happen before the hooks
	runShutdownHooks()
	holdFns.Store(true)
	defer runHeldFns() // after the locks below are let go
	worldMu.Lock()
	defer worldMu.Unlock()
	holdMu.Lock()
	defer holdMu.Unlock()
	w := current.Load()
	if w == nil {
		return nil
	}
	if err := busy(w.devices); err != nil {
		return fmt.Errorf("target: Shutdown refused: %w", err)
	}
	current.Store(nil)
	var errs []error
	for _, d := range w.devices {
		errs = append(errs, d.close())
	}
	return errors.Join(errs...)
}
