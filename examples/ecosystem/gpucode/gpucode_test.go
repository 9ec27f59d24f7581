package gpucode

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/gputest"
)

// The user's code on a fake NVIDIA and a fake AMD GPU: the data comes
// back, nothing is left allocated (gputest checks that at the end), and a
// driver failure in the middle is an error, with everything released.
func TestRoundTripOnFakeGPUs(t *testing.T) {
	fake := gputest.New(t, gputest.CUDA(1), gputest.HSA(1))
	xs := make([]float32, 1<<16)
	for i := range xs {
		xs[i] = float32(i) / 3
	}
	for _, d := range fake.Devices() {
		t.Run(d.Plugin(), func(t *testing.T) {
			got, err := RoundTrip(d, xs)
			require.NoError(t, err)
			require.Equal(t, xs, got)
		})
	}
	t.Run("second allocation fails", func(t *testing.T) {
		fake.Fail(t, "cuMemAlloc", 2)
		_, err := RoundTrip(fake.Devices()[0], xs)
		require.ErrorContains(t, err, "gpucode: result")
		require.ErrorContains(t, err, "CUDA_ERROR_UNKNOWN")
	})
	t.Run("copy fails", func(t *testing.T) {
		fake.Fail(t, "hsa_amd_memory_async_copy", 1)
		_, err := RoundTrip(fake.Devices()[1], xs)
		require.ErrorContains(t, err, "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
		t.Log(err)
	})
}
