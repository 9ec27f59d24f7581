package target

import (
	"sync"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/pinreg"
)

// The devices, their discovery and their numbering are internal/device's:
// a target.Device is the public layer over one device.Device, made when
// target first hands the device out (wrap) and attached to it, so that the
// core closes it with the device and asks its queues for the stream-ordered
// free.

// wrap returns the public layer of cd, making it at the first call.
func wrap(cd *device.Device) *Device {
	return (*Device)(cd.Attach(newLayer).(*layer))
}

// world is the current discovery as target hands it out.
type world struct{ *device.World }

// get returns the devices, discovering them at first use.
func get() world { return world{device.Discover()} }

// device returns device dev of w.
func (w world) device(dev int) (*Device, error) {
	cd, err := w.Get(dev)
	if err != nil {
		return nil, withDriverErrors(err, infoOf(w.World).plugins) // drivererror.go
	}
	return wrap(cd), nil
}

// devices returns w's devices: accelerators in order, then the host.
func (w world) devices() []*Device {
	cds := w.Devices()
	out := make([]*Device, len(cds))
	for i, cd := range cds {
		out[i] = wrap(cd)
	}
	return out
}

// attached returns the public layers made so far for the current world's
// devices, without discovering the devices or making a layer.
func attached() []*Device {
	w := device.Current()
	if w == nil {
		return nil
	}
	var out []*Device
	for _, cd := range w.Devices() {
		if l, ok := cd.Layer().(*layer); ok {
			out = append(out, (*Device)(l))
		}
	}
	return out
}

// worldInfo is what target adds to one discovery: the staging and
// lock-mapped settings the environment gives its devices (read once per
// world, so that its warnings are printed once) and the drivers' statuses
// with their errors as *DriverError (drivererror.go).
type worldInfo struct {
	w       *device.World
	cfg     StagingConfig
	mode    pinreg.MapMode
	plugins []DriverStatus
}

var (
	infoMu  sync.Mutex
	infoNow atomic.Pointer[worldInfo]
)

func infoOf(w *device.World) *worldInfo {
	if w == nil { // a device of a world Shutdown closed meanwhile: unusable anyway
		i := &worldInfo{}
		i.cfg, i.mode = readEnv()
		return i
	}
	if i := infoNow.Load(); i != nil && i.w == w {
		return i
	}
	infoMu.Lock()
	defer infoMu.Unlock()
	if i := infoNow.Load(); i != nil && i.w == w {
		return i
	}
	i := &worldInfo{w: w}
	i.cfg, i.mode = readEnv()
	for _, s := range w.Plugins() {
		i.plugins = append(i.plugins, driverError(s)) // drivererror.go
	}
	infoNow.Store(i)
	return i
}

// NumDevices is the number of accelerators (omp_get_num_devices); the host
// is not counted.
func NumDevices() int { return device.NumDevices() }

// InitialDevice is the host's device number: NumDevices().
func InitialDevice() int { return NumDevices() }

// DefaultDevice is the device used when none is named: 0 unless
// OMP_DEFAULT_DEVICE or SetDefaultDevice says otherwise.
func DefaultDevice() int { return device.DefaultDevice() }

// SetDefaultDevice sets the default device; it must be valid.
func SetDefaultDevice(dev int) error { return device.Discover().SetDefault(dev) }

// Get returns device dev; the initial device is valid too.
func Get(dev int) (*Device, error) { return get().device(dev) }

// Devices returns every device: accelerators in order, then the host.
func Devices() []*Device { return get().devices() }

// Plugins reports each plugin's driver status, accelerators first, the host
// last, whether or not it contributed devices.
func Plugins() []DriverStatus {
	return append([]DriverStatus(nil), infoOf(device.Discover()).plugins...)
}

// Shutdown closes every device: waits for and destroys their queues, frees
// every staging buffer (including those held by queues that never
// completed) and closes the plugins' devices. Devices from before are
// unusable afterwards; the next call of this package discovers anew.
//
// Memory held for live pinned blocks (alloc's pinned chunks) cannot be given up behind
// its owner's back: after the functions registered to run before it ran
// (alloc releases its idle pinned chunks), any device still holding some
// makes Shutdown refuse with ErrBusy and change nothing. Ranges locked with
// LockMem are unlocked with their device, and forgotten: the devices
// discovered next start with empty registries.
func Shutdown() error { return device.Shutdown() }
