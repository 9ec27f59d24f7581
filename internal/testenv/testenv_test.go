package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSettings(t *testing.T) {
	env := append([]string{
		"PATH=/bin",
		"OMPALLOC_CUDA_LIBRARY=/x/libcuda.so.1", // which driver: a fact of the machine
		"OMPALLOC_REAL_CUDA=/x/libcuda.so.1",
		"OMPALLOC_NEWGPU_LIBRARY=/x/libnewgpu.so", // any vendor's driver, by the pattern
		"OMPALLOC_REAL_NEWGPU=/x/libnewgpu.so",
		"OMPALLOC_LEAKCHECK=1",
		"OMPALLOC_ALLOC_CHILD=memlock", // a test's own child marker
		"OMPALLOC_CUDA_TEST_WANT=x",
		"OMPALLOC_TEST_LIB_PATH=/y",
		"OMPX_FOO=1", // not OMP_
	}, append(Hostile, HostileDrivers...)...)
	got := Settings(env)
	var want []string
	for _, kv := range append(Hostile, HostileDrivers...) {
		name, _, _ := strings.Cut(kv, "=")
		want = append(want, name)
	}
	require.Equal(t, want, got)
}

func TestNeutralize(t *testing.T) {
	t.Setenv(Marker, "") // t.Setenv restores it (unset) afterwards
	require.NoError(t, os.Unsetenv(Marker))
	for _, kv := range append(Hostile, HostileDrivers...) {
		name, v, _ := strings.Cut(kv, "=")
		t.Setenv(name, v)
	}
	t.Setenv("OMPALLOC_CUDA_LIBRARY", "/x/libcuda.so.1")

	t.Setenv("SOME_CHILD", "1")
	require.False(t, Neutralize("SOME_CHILD"), "a child keeps what its parent test set")
	require.Equal(t, "0", os.Getenv("OMPALLOC_PINNED_LIMIT"))
	require.NoError(t, os.Unsetenv("SOME_CHILD"))

	require.True(t, Neutralize("SOME_CHILD"))
	for _, kv := range append(Hostile, HostileDrivers...) {
		name, _, _ := strings.Cut(kv, "=")
		_, set := os.LookupEnv(name)
		require.False(t, set, kv)
	}
	require.Equal(t, "/x/libcuda.so.1", os.Getenv("OMPALLOC_CUDA_LIBRARY"), "the driver choice stays")
	require.Equal(t, "1", os.Getenv(Marker))

	t.Setenv("OMPALLOC_PINNED_LIMIT", "0")
	require.False(t, Neutralize(), "once neutralized (a child started with os.Environ), what is set now was set on purpose")
	require.Equal(t, "0", os.Getenv("OMPALLOC_PINNED_LIMIT"))
}

// Long skips unless LongEnv is set, and Neutralize keeps LongEnv.
func TestLong(t *testing.T) {
	require.True(t, Kept(LongEnv), "Neutralize must keep the request for the long tests")
	for _, tt := range []struct {
		value string
		runs  bool
	}{{"", false}, {"1", true}} {
		t.Setenv(LongEnv, tt.value)
		ran := false
		t.Run("long="+tt.value, func(t *testing.T) {
			Long(t, "a test of Long")
			ran = true
		})
		require.Equal(t, tt.runs, ran, "%s=%q", LongEnv, tt.value)
	}
	require.Equal(t, "internal/testenv/", pkgDir())
}
