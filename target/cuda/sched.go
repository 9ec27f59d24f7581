package cuda

import (
	"os"
	"strings"
	"unsafe"

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
	v := os.Getenv(EnvSched)
	switch strings.ToLower(strings.TrimSpace(v)) {
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
func (d *device) setSched() {
	drv := d.drv
	if drv.cuDevicePrimaryCtxGetState == 0 || drv.cuDevicePrimaryCtxSetFlags == 0 {
		return
	}
	want := schedFlag()
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
