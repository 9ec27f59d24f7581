package cuda

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/loader"
)

// Issue 28 item 5: Status.Advice says in words what a failed init means
// and what to do; target.DriverError carries it.
func TestAdvice(t *testing.T) {
	t.Setenv(Spec.EnvPath, "")
	initErr := func(code int, name string) error {
		return fmt.Errorf("CUDA driver x: %w: %w", loader.ErrInitFailed, &Error{Call: "cuInit", Code: code, Name: name})
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", loader.ErrDisabled), "unset OMPALLOC_DISABLE_CUDA to use NVIDIA GPUs"},
		{fmt.Errorf("x: %w", loader.ErrNotFound), "the NVIDIA driver is not installed here (libcuda.so.1 comes with the driver, not with the CUDA toolkit)"},
		{fmt.Errorf("x: %w", loader.ErrSymbolMissing), "an NVIDIA driver older than CUDA 11.0 (R450), or not libcuda at all"},
		{fmt.Errorf("x: %w: %w", loader.ErrInitFailed, errTooOld), "update the NVIDIA driver to one of CUDA 11.0 or later"},
		{initErr(cudaErrorNoDevice, "CUDA_ERROR_NO_DEVICE"), "it finds no NVIDIA GPU"},
		{initErr(cudaErrorSystemDriverMismatch, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"), "does not match the loaded nvidia kernel module"},
		{initErr(999, "CUDA_ERROR_UNKNOWN"), "cuInit failed with CUDA_ERROR_UNKNOWN (code 999)"},
	} {
		if tc.want == "" {
			require.Empty(t, advice(tc.err))
			continue
		}
		got := advice(tc.err)
		require.Contains(t, got, tc.want)
		if tc.err != nil && tc.want[:5] != "unset" {
			require.Contains(t, got, "; CUDA devices are skipped")
		}
	}
	t.Setenv(Spec.EnvPath, "/nowhere/libcuda.so.1")
	require.Contains(t, advice(fmt.Errorf("x: %w", loader.ErrNotFound)), "OMPALLOC_CUDA_LIBRARY=/nowhere/libcuda.so.1 names no loadable library")
}
