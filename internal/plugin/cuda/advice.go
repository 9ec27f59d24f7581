package cuda

import (
	"errors"
	"fmt"
	"os"

	"github.com/ompalloc/ompalloc/loader"
)

// minVersion is the oldest driver API the plugin binds: the _v2 entry points
// it requires (cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxSetFlags_v2)
// came with CUDA 11.0 (cuda.h: __CUDA_API_VERSION >= 11000), the driver of
// the R450 series.
const minVersion = 11000

// errTooOld is what Init's error wraps (with loader.ErrInitFailed) when
// cuDriverGetVersion reports a driver older than minVersion.
var errTooOld = errors.New("driver too old")

// advice says in words what a failed Init means on this machine and what a
// user can do about it (target.DriverError's Advice), for the failures met
// without a usable GPU; "" when Init succeeded.
func advice(err error) string {
	var e *Error
	var why string
	switch {
	case err == nil:
		return ""
	case errors.Is(err, loader.ErrDisabled):
		return fmt.Sprintf("unset %s to use NVIDIA GPUs", Spec.EnvDisable)
	case errors.Is(err, loader.ErrNotFound) && os.Getenv(Spec.EnvPath) != "":
		why = fmt.Sprintf("%s=%s names no loadable library: point it at the driver's libcuda.so.1, or unset it", Spec.EnvPath, os.Getenv(Spec.EnvPath))
	case errors.Is(err, loader.ErrNotFound):
		why = fmt.Sprintf("the NVIDIA driver is not installed here (libcuda.so.1 comes with the driver, not with the CUDA toolkit), or not where the dynamic loader looks: install it, or set %s to its path", Spec.EnvPath)
	case errors.Is(err, errTooOld):
		why = fmt.Sprintf("update the NVIDIA driver to one of CUDA %s or later (R450 and up)", versionString(minVersion))
	case errors.Is(err, loader.ErrSymbolMissing):
		why = fmt.Sprintf("the library lacks driver functions ompalloc needs: an NVIDIA driver older than CUDA %s (R450), or not libcuda at all: update the driver, or point %s at libcuda.so.1", versionString(minVersion), Spec.EnvPath)
	case errors.Is(err, ErrNoDevice):
		why = "the CUDA driver is installed, but it finds no NVIDIA GPU (none in this machine, the nvidia kernel module is not loaded, or CUDA_VISIBLE_DEVICES hides them all)"
	case errors.As(err, &e) && (e.Code == cudaErrorNoBinaryForGPU || e.Code == cudaErrorSystemDriverMismatch):
		why = "the CUDA driver library does not match the loaded nvidia kernel module (a driver updated without a reboot?): reboot, or reinstall the driver"
	case errors.As(err, &e) && e.Call == "cuInit":
		why = fmt.Sprintf("cuInit failed with %s (code %d): the driver could not be initialised", e.Name, e.Code)
	default:
		why = "the driver could not be initialised"
	}
	return why + "; CUDA devices are skipped"
}

// versionString is "major.minor" of a cuDriverGetVersion value (12020 → "12.2").
func versionString(v int32) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
