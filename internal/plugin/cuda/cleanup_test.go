package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A test that ends (or fails) with a copy still held at the fake's gate
// opens the gate in a cleanup that runs before hostBuf's (cleanups run last
// registered first): the fake's worker then reads the buffer while hostBuf
// unmaps it, a fault on a thread Go does not know that kills the test
// binary without a trace. hostBuf's cleanup waits for the fake's queued
// work first, so the copy has completed, from intact memory, once the
// subtest's cleanups are done.
func TestHostBufCleanupWaitsForQueuedCopies(t *testing.T) {
	d := dev(t, 0)
	a, err := d.Alloc(plugin.MemDevice, 1<<20)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Free(plugin.MemDevice, a) })
	qi, err := d.NewQueue()
	require.NoError(t, err)
	q := qi.(*Queue)
	t.Cleanup(func() { _ = q.Destroy() })

	t.Run("held copy at the end", func(t *testing.T) {
		src, sb := hostBuf(t, 1<<20)
		pattern(sb, 5)
		gate(t, "stream", true)
		t.Cleanup(func() { gate(t, "stream", false) })
		require.NoError(t, d.Copy(a, src, 1<<20, plugin.HostToDevice, q))
		done, err := q.Query()
		require.NoError(t, err)
		require.False(t, done, "the gate holds the copy")
	})
	done, err := q.Query()
	require.NoError(t, err)
	require.True(t, done, "the copy completed before its source was unmapped")

	dst, db := hostBuf(t, 1<<20)
	require.NoError(t, d.Copy(dst, a, 1<<20, plugin.DeviceToHost, nil))
	want := make([]byte, 1<<20)
	pattern(want, 5)
	require.Equal(t, want, db, "the device got the source's bytes")
}
