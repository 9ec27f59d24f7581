package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 10, item 5: info explains in words the init failures a machine
// without a GPU gives, for HSA as for CUDA.
func TestExplainInit(t *testing.T) {
	saved := kfd
	t.Cleanup(func() { kfd = saved })
	kfd = filepath.Join(t.TempDir(), "kfd") // absent
	got := explainInit("amdgpu", "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
	require.Contains(t, got, "there is no "+kfd+": no AMD GPU in this machine, or the amdgpu kernel driver is not loaded")
	kfd = t.TempDir() // present
	require.Contains(t, explainInit("amdgpu", "HSA_STATUS_ERROR_OUT_OF_RESOURCES"), "could not use "+kfd)
	require.Contains(t, explainInit("cuda", "CUDA_ERROR_NO_DEVICE"), "finds no NVIDIA GPU")
	require.Empty(t, explainInit("cuda", "CUDA_SUCCESS"))
	require.Empty(t, explainInit("host", "ok"))
}
