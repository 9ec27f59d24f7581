package cuda

import (
	"strings"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// EnvSched chooses how a thread waits for a CUDA device in a synchronize:
// blocking (the default), spin, yield or auto. It is read when a device is
// opened.
const EnvSched = "OMPALLOC_CUDA_SCHED"

// Scheduling flags of a context (cuda.h, CUctx_flags).
const (
	cuCtxSchedAuto         = 0x00
	cuCtxSchedSpin         = 0x01
	cuCtxSchedYield        = 0x02
	cuCtxSchedBlockingSync = 0x04
	cuCtxSchedMask         = 0x07
)

// schedFlag reads EnvSched. CU_CTX_SCHED_AUTO, the driver's default, spins
// a CPU core in every synchronize unless the process has more contexts than
// the machine has CPUs; on a GPU node that core is one an OpenMP thread
// wanted. So, as LLVM's offload plugin does, the default is
// CU_CTX_SCHED_BLOCKING_SYNC: the thread sleeps on a synchronization
// primitive, at the price of some wake-up latency. spin (lowest latency, a
// core busy), yield and auto are the other choices. A bad value warns once
// and reads as blocking.
func schedFlag() uint32 {
	v, _ := envvar.Lookup(EnvSched) // blank: unset, blocking
	switch strings.ToLower(v) {
	case "", "blocking", "blocking_sync":
		return cuCtxSchedBlockingSync
	case "spin":
		return cuCtxSchedSpin
	case "yield":
		return cuCtxSchedYield
	case "auto":
		return cuCtxSchedAuto
	}
	warn.Printf(warn.Env, "cuda", "%s=%q: not spin, yield, blocking or auto; using blocking", EnvSched, v)
	return cuCtxSchedBlockingSync
}

// setSched sets the scheduling flag on the device's primary context before
// Open activates it (cuDevicePrimaryCtxSetFlags_v2). A context that is
// already active belongs to someone else too (the CUDA runtime, another
// library) and keeps its flags, as LLVM's plugin leaves it. The flag is a
// tuning: a driver without these calls, or one that refuses them, leaves
// the device usable, with one warning.
//
// It also chooses the flags of the device's events (eventFlags).
func (d *device) setSched() {
	drv := d.drv
	want := schedFlag()
	d.evFlags = 0
	if want == cuCtxSchedBlockingSync {
		d.evFlags = cuEventBlockingSync
	}
	if drv.cuDevicePrimaryCtxGetState == 0 || drv.cuDevicePrimaryCtxSetFlags == 0 {
		return
	}
	var flags uint32
	var active int32
	err := drv.check("cuDevicePrimaryCtxGetState", call(drv.cuDevicePrimaryCtxGetState, uintptr(d.dev),
		uintptr(unsafe.Pointer(&flags)), uintptr(unsafe.Pointer(&active))))
	if err == nil && (active != 0 || flags&cuCtxSchedMask == want) {
		return
	}
	if err == nil {
		err = drv.check("cuDevicePrimaryCtxSetFlags", call(drv.cuDevicePrimaryCtxSetFlags, uintptr(d.dev), uintptr(flags&^cuCtxSchedMask|want)))
	}
	if err != nil {
		warn.Printf(warn.Env, "cuda", "%v: scheduling flag %#x not set (%s): %v", d, want, EnvSched, err)
	}
}

// cuEventBlockingSync is CU_EVENT_BLOCKING_SYNC (cuda.h, CUevent_flags).
const cuEventBlockingSync = 0x01

// eventFlags are the cuEventCreate flags of an event of d that the host
// may wait for (target's Event): CU_EVENT_DISABLE_TIMING unless timing, and
// CU_EVENT_BLOCKING_SYNC when the device's waits are to block (EnvSched
// blocking, the default). The reference: "CU_EVENT_BLOCKING_SYNC: Specifies
// that the created event should use blocking synchronization. A CPU thread
// that uses cuEventSynchronize() to wait on an event created with this flag
// will block until the event has actually been recorded"; without it,
// cuEventSynchronize may spin a core, whatever the context's scheduling
// flag, which costs an OpenMP program a thread for every wait. The price,
// also the reference's: "Events created with this flag specified and the
// CU_EVENT_BLOCKING_SYNC flag not specified will provide the best
// performance when used with cuStreamWaitEvent() and cuEventQuery()", and
// a blocking wait wakes later than a spinning one. So spin, yield or auto
// (a user who asked for latency) get events without it, and so do the
// events only streams wait for (the pool's, mempool.go), which the host
// never waits on.
func (d *device) eventFlags(timing bool) uintptr {
	f := d.evFlags
	if !timing {
		f |= cuEventDisableTiming
	}
	return f
}
