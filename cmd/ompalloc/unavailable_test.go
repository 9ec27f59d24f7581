package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

// Three fake GPUs, the middle one in compute mode PROHIBITED: info lists all
// three under their CUDA ordinals, says why device 1 cannot be used, and
// the others are usable.
func TestInfoUnavailableDevice(t *testing.T) {
	lib := fakedrv.Build(t, "fakecuda")
	env := []string{"OMPALLOC_CUDA_LIBRARY=" + lib, "OMPALLOC_DISABLE_HSA=1", "FAKECUDA_DEVICES=3", "FAKECUDA_PROHIBITED=1", "FAKECUDA_FAIL="}

	r := ompalloc(t, env, "info", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var info InfoReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &info))
	require.Equal(t, 3, info.NumDevices)
	require.Len(t, info.Devices, 4)
	for i, d := range info.Devices {
		require.Equal(t, i, d.Number)
		if i == 1 {
			require.False(t, d.Usable)
			require.Equal(t, "Fake CUDA Device 1", d.Name, "described without a context")
			require.Contains(t, d.Error, "device 1: device unavailable: CUDA device 1: open: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN (999)")
			continue
		}
		require.True(t, d.Usable, "device %d: %s", i, d.Error)
		require.Empty(t, d.Error)
	}

	r = ompalloc(t, env, "info")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "device 1 cannot be used (it keeps its number; the others work): device 1: device unavailable: CUDA device 1: open: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN (999)")
	require.Contains(t, r.stdout, "Fake CUDA Device 2")
}
