// Package gputest tests GPU code without a GPU, as net/http/httptest tests
// HTTP code without a network: New builds a fake NVIDIA driver (libcuda) or
// a fake AMD HSA runtime (libhsa-runtime64), or both, points ompalloc at
// them and hands back a Fake whose methods inject failures, hold the
// devices' work pending and read the driver's own counters (live device
// allocations, pinned host memory, streams, misuse caught).
//
//	func TestUpload(t *testing.T) {
//		fake := gputest.New(t, gputest.CUDA(2))
//		d := fake.Devices()[0]
//		arr, err := target.AllocArray[float32](d, target.MemDevice, 1024)
//		...
//	}
//
// The fakes are C libraries that follow the real drivers' ABI and are no
// kinder than their documentation: copies are performed late, on driver
// threads, and read their source only then, so a host buffer reused before
// its copy completed is caught; stream-ordered pool memory touched outside
// its allocation counts as misuse; device addresses fault when the host
// dereferences them. Their C sources are part of this module (embedded in
// the package), so they reach your module cache with it; New compiles them
// once per machine with the C compiler you have ($CC, default gcc) into the
// OS temp directory. Without one, New skips the test with the reason and
// Start returns an error matching ErrNoCompiler. Only linux is supported
// (the fakes are ELF shared objects); CGO_ENABLED=0 builds are fine.
//
// # One fake per test binary
//
// ompalloc loads each vendor's driver library once per process, at the
// first use of a device (anything that discovers devices: target.Get,
// target.NumDevices, a pinned allocator, ...), and the fake reads its
// device count and memory size when the driver is initialised. So:
//
//   - call New (or Start, from TestMain) before anything in the test
//     binary touches a device. A New after that fails the test with
//     ErrTooLate rather than testing the real GPU or none;
//   - every New of a test binary must ask for the same configuration
//     (vendors, devices, memory, copy delay, pools): the second and later
//     calls share the driver loaded by the first, each with its own
//     failure injection and checks. A different configuration is an
//     error. To test several configurations, use a test binary (package)
//     for each, or run the test again in a child process of its own with
//     the configuration in its environment;
//   - the simplest layout sets the fake up in TestMain with Start, so that
//     test order does not matter, and calls New in the tests that want the
//     per-test checks (it returns the same fake).
//
// New's test ends with checks (t.Cleanup): failures injected by Fail stop,
// work held by Hold is released, and the test fails if the driver caught a
// misuse during it or if device memory allocated during it is still live
// once the devices' pools are trimmed (a leak), unless AllowLeaks was given.
//
// The variables New sets (OMPALLOC_CUDA_LIBRARY, OMPALLOC_HSA_LIBRARY,
// OMPALLOC_DISABLE_CUDA, OMPALLOC_DISABLE_HSA and the fakes' FAKECUDA_* and
// FAKEHSA_* switches) stay set for the life of the process, as the loaded
// driver does: a vendor not asked for is disabled, so a real GPU of the
// machine never joins the fake's devices.
package gputest
