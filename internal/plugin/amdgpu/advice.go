package amdgpu

import (
	"errors"
	"fmt"
	"os"

	"github.com/ompalloc/ompalloc/loader"
)

// kfd is the AMD kernel driver's device node, which hsa_init opens.
var kfd = "/dev/kfd"

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
		return fmt.Sprintf("unset %s to use AMD GPUs", Library.EnvDisable)
	case errors.Is(err, loader.ErrNotFound) && os.Getenv(Library.EnvPath) != "":
		why = fmt.Sprintf("%s=%s names no loadable library: point it at ROCm's libhsa-runtime64.so.1, or unset it", Library.EnvPath, os.Getenv(Library.EnvPath))
	case errors.Is(err, loader.ErrNotFound):
		why = fmt.Sprintf("the ROCm runtime is not installed here (libhsa-runtime64.so.1, package hsa-rocr), or not where the dynamic loader looks: install it, or set %s to its path", Library.EnvPath)
	case errors.Is(err, loader.ErrSymbolMissing):
		why = fmt.Sprintf("the library lacks HSA functions ompalloc needs: a ROCm runtime older than ompalloc needs, or not libhsa-runtime64 at all: update ROCm, or point %s at libhsa-runtime64.so.1", Library.EnvPath)
	case errors.As(err, &e) && e.Call == "hsa_init" && e.Code == StatusErrorOutOfResources:
		why = "it could not use " + kfd + " (is this user in the render group?)"
		if _, serr := os.Stat(kfd); serr != nil {
			why = "there is no " + kfd + ": no AMD GPU in this machine, or the amdgpu kernel driver is not loaded"
		}
		why = "the ROCm runtime is installed, but hsa_init failed: " + why
	case errors.As(err, &e) && e.Call == "hsa_init":
		why = fmt.Sprintf("hsa_init failed with %s (%#x): the runtime could not be initialised", e.Name, e.Code)
	default:
		why = "the runtime could not be initialised"
	}
	return why + "; AMD devices are skipped"
}
