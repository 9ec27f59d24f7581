package amdgpu

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// scratchOf is the device's marker buffer, 0 when it has none.
func scratchOf(d *device) uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scratch
}

// The marker buffer of a device's events is made at its first event, from
// the GPU's fine-grained pool, and goes with the device: Close frees it and
// forgets it. Before the fix it came from the coarse-grained pool and
// stayed in a package-level map keyed by the closed device (this test,
// reading that map, failed on "still referenced").
func TestEventScratchGoesWithDevice(t *testing.T) {
	d := fakeDevices(t)[0]
	allocs := count(t, "allocs")
	qi, err := d.NewQueue()
	require.NoError(t, err)
	ev, err := d.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, ev.Record(qi))
	require.NoError(t, ev.Synchronize())
	require.NotZero(t, scratchOf(d))
	require.Same(t, d.pools.fine, d.scratchPool, "a fine-grained pool suffices for markers")
	require.Equal(t, allocs+1, count(t, "allocs"), "one buffer for the device's markers")
	require.NoError(t, ev.Destroy())
	require.NoError(t, qi.Destroy())
	require.NoError(t, d.Close())
	require.Zero(t, scratchOf(d), "the closed device's buffer is still referenced")
	require.Equal(t, allocs, count(t, "allocs"))
}
