package main

import (
	"os"
	"strings"
)

// kfd is the AMD kernel driver's device node, which hsa_init opens.
var kfd = "/dev/kfd"

// explainInit says in words what a driver's failed initialisation means on
// this machine, for the results a user meets without a GPU; "" for the
// others (their name says enough, or the driver's own text follows).
func explainInit(plugin, init string) string {
	switch {
	case plugin == "cuda" && strings.HasPrefix(init, "CUDA_ERROR_NO_DEVICE"):
		return "cuda: CUDA_ERROR_NO_DEVICE: the CUDA driver library is installed, but it finds no NVIDIA GPU " +
			"(none in this machine, or the nvidia kernel module is not loaded); CUDA devices are skipped"
	case plugin == "cuda" && strings.HasPrefix(init, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
		plugin == "cuda" && strings.HasPrefix(init, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"):
		return "cuda: " + init + ": the CUDA driver library does not match the loaded nvidia kernel module; CUDA devices are skipped"
	case plugin == "amdgpu" && strings.HasPrefix(init, "HSA_STATUS_ERROR_OUT_OF_RESOURCES"):
		why := "it could not use " + kfd + " (is this user in the render group?)"
		if _, err := os.Stat(kfd); err != nil {
			why = "there is no " + kfd + ": no AMD GPU in this machine, or the amdgpu kernel driver is not loaded"
		}
		return "amdgpu: HSA_STATUS_ERROR_OUT_OF_RESOURCES: the ROCm runtime is installed, but hsa_init failed: " +
			why + "; AMD devices are skipped"
	}
	return ""
}
