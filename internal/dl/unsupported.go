//go:build !linux && !darwin

package dl

// ompalloc runs on Linux (amd64, arm64) and macOS (arm64) only: it loads
// libc and the GPU drivers through purego's dlopen, with the C ABI of those
// systems. This file makes a build elsewhere fail with one line that says
// so, instead of errors from purego's internals.
var _ = ompalloc_builds_only_on_linux_and_macos
