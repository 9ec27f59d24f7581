package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Issue 27 item 3: a Destroy whose cuStreamSynchronize failed returned at
// once, leaking the stream (and its pool event), and nothing could destroy
// it later. The stream is destroyed all the same (cuStreamDestroy releases
// it once its work completed), and the queue still answers for that work:
// Query says not done while the fake's gate holds it, Synchronize waits for
// it, and only then is it known done.
func TestDestroyAfterFailedSynchronize(t *testing.T) {
	d := dev(t, 0)
	streams := live(t, liveStreams)
	qi, err := d.NewQueue()
	require.NoError(t, err)
	q := qi.(*Queue)
	a, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	src, sb := hostBuf(t, 4096)
	pattern(sb, 9)

	gate(t, "stream", true) // the stream performs nothing until opened
	t.Cleanup(func() { gate(t, "stream", false) })
	require.NoError(t, d.Copy(a, src, 4096, plugin.HostToDevice, q))
	t.Setenv("FAKECUDA_FAIL", "cuStreamSynchronize=700")
	requireCode(t, q.Destroy(), "cuStreamSynchronize", 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
	require.Equal(t, streams, live(t, liveStreams), "the stream is destroyed although its wait failed")
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done, "the held copy is not done")
	require.NoError(t, q.Destroy(), "a second Destroy has nothing left to destroy")

	t.Setenv("FAKECUDA_FAIL", "")
	gate(t, "stream", false)
	require.NoError(t, q.Synchronize(), "waits for the destroyed stream's work")
	done, err = q.Query()
	require.NoError(t, err)
	require.True(t, done)
	back := make([]byte, 4096)
	dst, db := hostBuf(t, 4096)
	require.NoError(t, d.Copy(dst, a, 4096, plugin.DeviceToHost, nil))
	copy(back, db)
	require.Equal(t, sb, back, "the copy ran after the destroy")
	require.NoError(t, d.Free(plugin.MemDevice, a))

	// A queue destroyed after a good wait is simply gone.
	qi, err = d.NewQueue()
	require.NoError(t, err)
	require.NoError(t, qi.Destroy())
	_, err = qi.Query()
	require.ErrorIs(t, err, ErrClosed)
}
