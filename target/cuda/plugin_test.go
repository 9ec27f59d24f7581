package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/loader"
	"github.com/ompalloc/ompalloc/target/plugin"
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
	p := newPlugin(&lazyDriver{lazy: loader.Lazy{Spec: Spec}})
	st := p.Status()
	require.Equal(t, "not initialised", st.Init)
	require.ErrorIs(t, st.Err, ErrNotInitialised)
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
			p := newPlugin(&lazyDriver{lazy: loader.Lazy{Spec: spec}})
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
	require.Equal(t, "not initialised", p.Status().Init)
	require.False(t, mapped(), "Status loaded the driver")
	require.NoError(t, p.Init())
	require.True(t, mapped())
	require.Len(t, p.Devices(), 2)
}

// A library that lacks a _v2 symbol must not be bound to the unversioned one,
// whose ABI differs.
func TestBindRefusesUnversionedFallback(t *testing.T) {
	needFake(t)
	lib, err := loader.Open(loader.Spec{Name: "fake", Candidates: []string{fakeLib}})
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
// call, Status the code, and devices opened before the failure are released.
func TestInitFailures(t *testing.T) {
	needFake(t)
	for _, tc := range []struct{ fail, want, status string }{
		{"cuInit=999", "driver initialisation failed: cuInit: CUDA_ERROR_UNKNOWN (999)", "CUDA_ERROR_UNKNOWN"},
		{"cuDeviceGetCount=3", "cuDeviceGetCount: CUDA_ERROR_NOT_INITIALIZED (3)", "CUDA_SUCCESS"},
		{"cuDevicePrimaryCtxRetain:2=2", "CUDA device 1: cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY (2)", "CUDA_SUCCESS"},
		{"cuDeviceGetName:1=101", "CUDA device 0: cuDeviceGetName: CUDA_ERROR_INVALID_DEVICE (101)", "CUDA_SUCCESS"},
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
	retained := calls(t, "cuDevicePrimaryCtxRetain")
	if strings.Contains(err.Error(), "cuDevicePrimaryCtxRetain") {
		retained-- // the injected failure retained nothing
	}
	require.Equal(t, retained, calls(t, "cuDevicePrimaryCtxRelease"), "every context retained was released")
}
