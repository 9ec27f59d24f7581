package gputest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/target"
)

// Issue 31 item 4: a driver's error reaches the user saying each thing
// once: the device by its OpenMP number (never the plugin's own "amdgpu
// device 0" for device 2), the operation, then the driver's function,
// code and text.
func TestDriverErrorsSayEachThingOnce(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	for _, tc := range []struct {
		dev               int
		alloc, copy, code string
	}{
		{0, "cuMemAlloc", "cuMemcpyHtoDAsync", "CUDA_ERROR_UNKNOWN (999)"},
		{2, "hsa_amd_memory_pool_allocate", "hsa_amd_memory_async_copy", "HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"},
	} {
		d := fake.Devices()[tc.dev]
		t.Run(d.Plugin(), func(t *testing.T) {
			check := func(err error, op, fn string) {
				t.Helper()
				require.Error(t, err)
				msg := err.Error()
				require.True(t, strings.HasPrefix(msg, fmt.Sprintf("device %d: %s", d.ID, op)), "%s", msg)
				require.Equal(t, 1, strings.Count(msg, op), "the operation once: %s", msg)
				require.Equal(t, 1, strings.Count(msg, "device "+fmt.Sprint(d.ID)+":"), "%s", msg)
				require.NotContains(t, msg, "CUDA device", "the plugin's numbering: %s", msg)
				require.NotContains(t, msg, "amdgpu device", "the plugin's numbering: %s", msg)
				require.Contains(t, msg, fn+": "+tc.code)
			}
			fake.Fail(t, tc.alloc, 1)
			_, err := target.AllocArray[byte](d, target.MemDevice, 4096)
			check(err, "alloc of 4096 bytes of device memory", tc.alloc)

			a, err := target.AllocArray[byte](d, target.MemDevice, 1<<18)
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Free()) }()
			q, err := d.NewQueue()
			require.NoError(t, err)
			defer func() { require.NoError(t, q.Close()) }()
			fake.Fail(t, tc.copy, 1)
			err = target.CopyToDevice(a, make([]byte, 1<<18), q)
			check(err, "host-to-device of 262144 bytes", tc.copy)
		})
	}
}
