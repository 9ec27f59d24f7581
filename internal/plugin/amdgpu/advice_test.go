package amdgpu

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/loader"
)

// Issue 10 item 5, issue 28 item 5: Status.Advice says in words what a
// failed init means on this machine, /dev/kfd's presence included.
func TestAdvice(t *testing.T) {
	saved := kfd
	t.Cleanup(func() { kfd = saved })
	t.Setenv(Library.EnvPath, "")
	noKFD := fmt.Errorf("HSA runtime x: %w: %w", loader.ErrInitFailed, &Error{Call: "hsa_init", Code: StatusErrorOutOfResources, Name: "HSA_STATUS_ERROR_OUT_OF_RESOURCES"})

	kfd = filepath.Join(t.TempDir(), "kfd") // absent
	require.Equal(t, "the ROCm runtime is installed, but hsa_init failed: there is no "+kfd+
		": no AMD GPU in this machine, or the amdgpu kernel driver is not loaded; AMD devices are skipped", advice(noKFD))
	kfd = t.TempDir() // present
	require.Contains(t, advice(noKFD), "it could not use "+kfd+" (is this user in the render group?)")

	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", loader.ErrDisabled), "unset OMPALLOC_DISABLE_HSA to use AMD GPUs"},
		{fmt.Errorf("x: %w", loader.ErrNotFound), "the ROCm runtime is not installed here"},
		{fmt.Errorf("x: %w", loader.ErrSymbolMissing), "a ROCm runtime older than ompalloc needs"},
		{fmt.Errorf("x: %w: %w", loader.ErrInitFailed, &Error{Call: "hsa_init", Code: 0x1000, Name: "HSA_STATUS_ERROR"}), "hsa_init failed with HSA_STATUS_ERROR (0x1000)"},
	} {
		if tc.want == "" {
			require.Empty(t, advice(tc.err))
			continue
		}
		require.Contains(t, advice(tc.err), tc.want)
	}
	t.Setenv(Library.EnvPath, "/nowhere/libhsa.so")
	require.Contains(t, advice(fmt.Errorf("x: %w", loader.ErrNotFound)), "OMPALLOC_HSA_LIBRARY=/nowhere/libhsa.so names no loadable library")
}
