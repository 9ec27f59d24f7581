//go:build !linux

package amdgpu

// libraryFile: ROCm runs on Linux only; elsewhere the soname is reported.
func libraryFile(uintptr) string { return "" }
