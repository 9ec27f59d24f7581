package amdgpu

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/loader"
)

// multiarch is Debian's library directory name of each architecture.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// realLibrary is ROCm's runtime to test against: OMPALLOC_REAL_HSA, else
// Debian's libhsa-runtime64-1 for this test binary's architecture. A library
// for another architecture (the amd64 one seen by an arm64 binary under
// qemu) is skipped, not failed: this process could not load it.
func realLibrary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("OMPALLOC_REAL_HSA")
	if p == "" {
		p = "/usr/lib/" + multiarch[runtime.GOARCH] + "/libhsa-runtime64.so.1"
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real HSA runtime not installed (%v): install Debian's libhsa-runtime64-1 or set OMPALLOC_REAL_HSA", err)
	}
	if err := fakedrv.CheckArch(p); err != nil {
		t.Skipf("real HSA runtime %s: %v", p, err)
	}
	return p
}

// Against the real runtime, in a child process so that it is the only HSA
// library loaded: every symbol binds, and hsa_init either fails by name with
// HSA_STATUS_ERROR_OUT_OF_RESOURCES (no /dev/kfd: no AMD GPU driver) with
// no devices, or succeeds where a GPU is present.
func TestRealLibrary(t *testing.T) {
	lib := realLibrary(t)
	if !inChild(t, "TestRealLibrary", "OMPALLOC_HSA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=") {
		return
	}

	l, err := dl.Open(Library)
	require.NoError(t, err)
	var s syms
	table := s.table()
	require.NoError(t, l.Bind(table))
	for _, sym := range table {
		require.NotZero(t, *sym.Addr, "%s bound", sym.Name)
	}

	p := New()
	err = p.Init()
	st := p.Status()
	t.Logf("status: library %s, version %q, init %s; err: %v", st.Library, st.Version, st.Init, err)
	require.Contains(t, st.Library, "libhsa-runtime64.so")
	_, kfdErr := os.Stat("/dev/kfd")
	if err != nil {
		require.ErrorIs(t, err, loader.ErrInitFailed)
		var he *Error
		require.ErrorAs(t, err, &he)
		require.Equal(t, "hsa_init", he.Call)
		require.NotEmpty(t, he.Desc, "named by the runtime's hsa_status_string, even before a successful hsa_init")
		if errors.Is(kfdErr, os.ErrNotExist) {
			require.Equal(t, StatusErrorOutOfResources, he.Code)
			require.Equal(t, "HSA_STATUS_ERROR_OUT_OF_RESOURCES", he.Name)
			require.Equal(t, "HSA_STATUS_ERROR_OUT_OF_RESOURCES", st.Init)
		}
		require.True(t, strings.HasPrefix(st.Init, "HSA_STATUS_"), st.Init)
		require.Empty(t, p.Devices())
		return
	}
	require.Equal(t, "HSA_STATUS_SUCCESS", st.Init)
	require.NotEmpty(t, st.Version)
	for i, d := range p.Devices() {
		t.Logf("device %d: %+v", i, d.Info())
		require.Equal(t, "amd", d.Info().Vendor)
	}
}
