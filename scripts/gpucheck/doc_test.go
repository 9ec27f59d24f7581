// Package gpucheck tests scripts/gpu-check.sh, the bundle of test binaries
// and CLI that is built here and run on a GPU host without Go, a C compiler
// or the source tree. It has no code of its own, only tests (so no program
// can import it): run_test.go checks the
// script's summary on stand-in binaries (always), and dryrun_test.go builds
// the real bundle and runs it against the project's fake libcuda in a
// directory holding only the bundle, with go and gcc off PATH, for amd64 and
// (under qemu-user) arm64, when OMPALLOC_GPU_DRYRUN=1, as .ci/run sets: it
// builds ten binaries per architecture (the probe and examples/pipeline among them).
package gpucheck
