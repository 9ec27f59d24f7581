package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/loader"
)

func TestInitEnumeratesDevices(t *testing.T) {
	p := fake(t)
	require.Equal(t, "cuda", p.Name())
	for i, d := range p.Devices() {
		info := d.Info()
		require.Equal(t, plugin.Info{
			Name:       "Fake CUDA Device " + string(rune('0'+i)),
			Vendor:     "nvidia",
			Driver:     fakeLib,
			Version:    "12.2",
			Memory:     16 << 30,
			Capability: "9.0",
			NUMANode:   -1,
		}, info)
	}
	st := p.Status()
	require.Equal(t, plugin.Status{Plugin: "cuda", Library: fakeLib, Version: "12.2", Init: "CUDA_SUCCESS"}, st)
	require.NoError(t, p.Init(), "a second Init returns the first result")
}

func TestStatusBeforeInit(t *testing.T) {
	p := newPlugin(&lazyDriver{lazy: dl.Lazy{Spec: Spec}})
	st := p.Status()
	require.Equal(t, "Init not called", st.Init)
	require.ErrorIs(t, st.Err, ErrInitNotCalled)
	require.Empty(t, p.Devices())
}

// A missing or disabled library is an ordinary result: no devices, a Status
// that says why, errors that match the loader's.
func TestMissingOrDisabledLibrary(t *testing.T) {
	for _, tc := range []struct {
		name, env, value string
		is               error
		prefix           string
	}{
		{"not found", "OMPALLOC_TEST_CUDA_PATH", "/nonexistent/libcuda.so.1", loader.ErrNotFound, "not found: "},
		{"disabled", "OMPALLOC_TEST_CUDA_OFF", "1", loader.ErrDisabled, "disabled: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			spec := Spec
			spec.EnvPath, spec.EnvDisable = "OMPALLOC_TEST_CUDA_PATH", "OMPALLOC_TEST_CUDA_OFF"
			p := newPlugin(&lazyDriver{lazy: dl.Lazy{Spec: spec}})
			err := p.Init()
			require.ErrorIs(t, err, tc.is)
			require.Empty(t, p.Devices())
			st := p.Status()
			require.Empty(t, st.Library)
			require.Empty(t, st.Version)
			require.True(t, strings.HasPrefix(st.Init, tc.prefix), "Status.Init %q", st.Init)
			require.ErrorIs(t, st.Err, tc.is)
		})
	}
}

// FAKECUDA_DEVICES=0: cuInit fails with CUDA_ERROR_NO_DEVICE, as the real
// driver does on a machine without a GPU.
func TestNoDevice(t *testing.T) {
	needFake(t)
	runChild(t, "TestNoDeviceChild", "FAKECUDA_DEVICES=0")
}

func TestNoDeviceChild(t *testing.T) {
	inChild(t)
	p := New()
	err := p.Init()
	requireCode(t, err, "cuInit", 100, "CUDA_ERROR_NO_DEVICE")
	require.ErrorIs(t, err, ErrNoDevice)
	require.ErrorIs(t, err, loader.ErrInitFailed)
	require.Empty(t, p.Devices())
	st := p.Status()
	require.Equal(t, "CUDA_ERROR_NO_DEVICE", st.Init)
	require.Equal(t, "12.2", st.Version)
	require.Equal(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), st.Library)
	require.ErrorIs(t, st.Err, ErrNoDevice)
}

// New loads nothing: the library is mapped into the process by Init only.
func TestLazyLoad(t *testing.T) {
	needFake(t)
	runChild(t, "TestLazyLoadChild")
}

func TestLazyLoadChild(t *testing.T) {
	inChild(t)
	lib := os.Getenv("OMPALLOC_CUDA_LIBRARY")
	mapped := func() bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skipf("no /proc/self/maps: %v", err)
		}
		return strings.Contains(string(b), lib)
	}
	p := New()
	require.False(t, mapped(), "New loaded the driver")
	require.Equal(t, "Init not called", p.Status().Init)
	require.False(t, mapped(), "Status loaded the driver")
	require.NoError(t, p.Init())
	require.True(t, mapped())
	require.Len(t, p.Devices(), 2)
}

// A library that lacks a _v2 symbol must not be bound to the unversioned one,
// whose ABI differs.
func TestBindRefusesUnversionedFallback(t *testing.T) {
	needFake(t)
	lib, err := dl.Open(dl.Spec{Name: "fake", Candidates: []string{fakeLib}})
	require.NoError(t, err)
	d, err := bind(lib)
	require.NoError(t, err)
	v1, err := lib.Sym("cuMemAlloc")
	require.NoError(t, err)
	v2, err := lib.Sym("cuMemAlloc_v2")
	require.NoError(t, err)
	require.NotEqual(t, v1, v2)
	require.Equal(t, v2, d.cuMemAlloc, "cuMemAlloc bound to its _v2 entry point")
	require.Equal(t, "12.2", must(d.version()))
	require.Equal(t, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", d.errorName(712))
	require.Equal(t, "CUresult(4242)", d.errorName(4242), "codes the driver does not name")
	require.False(t, errors.Is(d.check("x", 0), ErrInvalidValue))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Failures during Init, injected in a fresh process each: the error names the
// call, Status the code, and no context was retained.
func TestInitFailures(t *testing.T) {
	needFake(t)
	for _, tc := range []struct{ fail, want, status string }{
		{"cuInit=999", "driver initialisation failed: cuInit: CUDA_ERROR_UNKNOWN (999)", "CUDA_ERROR_UNKNOWN"},
		{"cuDeviceGetCount=3", "cuDeviceGetCount: CUDA_ERROR_NOT_INITIALIZED (3)", "CUDA_SUCCESS"},
	} {
		t.Run(tc.fail, func(t *testing.T) {
			runChild(t, "TestInitFailuresChild", "FAKECUDA_FAIL="+tc.fail,
				"OMPALLOC_CUDA_TEST_WANT="+tc.want, "OMPALLOC_CUDA_TEST_STATUS="+tc.status)
		})
	}
}

func TestInitFailuresChild(t *testing.T) {
	inChild(t)
	p := newPlugin(defaultDriver)
	err := p.Init()
	require.Error(t, err)
	require.Contains(t, err.Error(), os.Getenv("OMPALLOC_CUDA_TEST_WANT"))
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Empty(t, p.Devices())
	st := p.Status()
	require.Equal(t, os.Getenv("OMPALLOC_CUDA_TEST_STATUS"), st.Init)
	require.Equal(t, err, st.Err)
	require.Zero(t, calls(t, "cuDevicePrimaryCtxRetain"), "Init retains no context")
}

// Three GPUs, the middle one in compute mode PROHIBITED (its context cannot
// be made) or not describable: Init retains no context, all three keep their
// CUDA ordinals, the middle one fails every use with the driver's reason and
// the others work, each with one context of its own.
func TestLazyOpen(t *testing.T) {
	needFake(t)
	for _, tc := range []struct{ name, env, want string }{
		{"prohibited", "FAKECUDA_PROHIBITED=1", "CUDA device 1: open: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN (999)"},
		{"not describable", "FAKECUDA_FAIL=cuDeviceGetName:2=101", "CUDA device 1: cuDeviceGetName: CUDA_ERROR_INVALID_DEVICE (101)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runChild(t, "TestLazyOpenChild", "FAKECUDA_DEVICES=3", tc.env, "OMPALLOC_CUDA_TEST_WANT="+tc.want)
		})
	}
}

func TestLazyOpenChild(t *testing.T) {
	inChild(t)
	want := os.Getenv("OMPALLOC_CUDA_TEST_WANT")
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	require.Equal(t, "CUDA_SUCCESS", p.Status().Init)
	impls := p.Devices()
	require.Len(t, impls, 3, "the unusable device keeps its place")
	require.Zero(t, calls(t, "cuDevicePrimaryCtxRetain"), "discovery made no context")
	require.Equal(t, "Fake CUDA Device 0", impls[0].Info().Name)
	require.Equal(t, "Fake CUDA Device 2", impls[2].Info().Name)

	// The first use opens a device: one context, on that device only.
	p0, err := impls[0].Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	require.Equal(t, 1, calls(t, "cuDevicePrimaryCtxRetain"))
	require.NoError(t, impls[0].Free(plugin.MemDevice, p0))

	bad := impls[1]
	for range 2 { // the same error every time, and no new attempt
		_, err := bad.Alloc(plugin.MemDevice, 4096)
		require.ErrorContains(t, err, want)
		var e *Error
		require.ErrorAs(t, err, &e, "the driver's error, by name")
		require.ErrorContains(t, bad.(plugin.Opener).Open(), want)
		_, err = bad.NewQueue()
		require.ErrorContains(t, err, want)
		_, err = bad.LockHost(0x10000, 4096)
		require.ErrorContains(t, err, want)
	}
	retained := calls(t, "cuDevicePrimaryCtxRetain")
	require.LessOrEqual(t, retained, 2, "device 1 was asked at most once")

	q, err := impls[2].NewQueue()
	require.NoError(t, err, "device 2 works")
	require.NoError(t, q.Destroy())
	for _, d := range impls {
		require.NoError(t, d.Close(), "closing a device that never opened is no error")
	}
	failedRetains := strings.Count(want, "cuDevicePrimaryCtxRetain") // the prohibited device's one attempt
	require.Equal(t, calls(t, "cuDevicePrimaryCtxRetain")-failedRetains, calls(t, "cuDevicePrimaryCtxRelease"),
		"every context retained was released, none that was not")
	require.Equal(t, 2, calls(t, "cuDevicePrimaryCtxRelease"), "devices 0 and 2")
}
