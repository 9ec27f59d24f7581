package amdgpu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// holdUntilDue waits until the fake holds n copies at its closed "copy"
// gate whose delay has passed ("due": they wait only for the gate or their
// dependencies), so that opening the gate lets the fake choose among all of
// them: newest first where no signal orders them.
func holdUntilDue(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); count(t, "due") < n; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the fake never had %d copies due (has %d)", n, count(t, "due"))
	}
}

// The fake promises only what hsa_amd_memory_async_copy documents: a copy
// starts once its dependent signals are 0, and copies not ordered by
// signals complete in any order. With one engine and the copies held at
// the gate it performs the newest first, so a device-to-host copy
// submitted after a host-to-device copy of the same buffer reads the old
// contents unless it depends on the first copy's signal.
func TestFakeOrdersOnlyBySignals(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestFakeOrdersOnlyBySignals", "FAKEHSA_ENGINES=1", "FAKEHSA_COPY_DELAY_US=0") {
		return
	}
	d := fakeDevices(t)[0]
	const n = 4096
	src, dst := hostBuffer(t, n), hostBuffer(t, n)
	srcDev, err := d.LockHost(src, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.UnlockHost(src)) })
	dstDev, err := d.LockHost(dst, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.UnlockHost(dst)) })
	dev, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) })
	fn := d.fn

	for _, chained := range []bool{false, true} {
		old := pattern(src, n, 1)
		require.NoError(t, d.Copy(dev, src, n, plugin.HostToDevice, nil)) // dev holds old
		want := pattern(src, n, 2)
		pattern(dst, n, 3)

		hsaGate(t, "copy", true)
		first, err := fn.newSignal()
		require.NoError(t, err)
		second, err := fn.newSignal()
		require.NoError(t, err)
		require.NoError(t, fn.asyncCopy(dev, d.agent, srcDev, d.agent, n, 0, first))
		var dep uint64
		if chained {
			dep = first
		}
		require.NoError(t, fn.asyncCopy(dstDev, d.agent, dev, d.agent, n, dep, second))
		holdUntilDue(t, 2)
		hsaGate(t, "copy", false)
		fn.waitZero(first)
		fn.waitZero(second)
		require.NoError(t, fn.destroySignal(first))
		require.NoError(t, fn.destroySignal(second))
		if chained {
			require.Equal(t, want, cmem.Bytes(dst, n), "a copy started before its dependent signal was 0")
		} else {
			require.Equal(t, old, cmem.Bytes(dst, n), "unordered copies ran in submission order: the fake is kinder than ROCr")
		}
	}
}

// An event recorded on one queue orders another queue's later copies
// after the first queue's work, without the host waiting (the fake holds
// all of it at its gate until the test opens it), though the fake
// performs unordered copies newest first.
func TestEventOrdersQueues(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestEventOrdersQueues", "FAKEHSA_ENGINES=1", "FAKEHSA_COPY_DELAY_US=0") {
		return
	}
	ds := fakeDevices(t)
	for _, pair := range [][2]int{{0, 0}, {0, 1}} {
		a, b := ds[pair[0]], ds[pair[1]]
		const chunks, each = 8, 4096
		const n = chunks * each
		src, dst := hostBuffer(t, n), hostBuffer(t, n)
		want := pattern(src, n, 5)
		pattern(dst, n, 6)
		dev, err := a.Alloc(plugin.MemDevice, n)
		require.NoError(t, err)
		qa, err := a.NewQueue()
		require.NoError(t, err)
		qb, err := b.NewQueue()
		require.NoError(t, err)
		ev, err := a.NewEvent(false)
		require.NoError(t, err)

		hsaGate(t, "copy", true)
		t.Cleanup(func() { hsaGate(t, "copy", false) })
		for i := range uintptr(chunks) {
			require.NoError(t, a.Copy(dev+i*each, src+i*each, each, plugin.HostToDevice, qa))
		}
		require.NoError(t, ev.Record(qa))
		require.NoError(t, ev.Wait(qb))
		// b reads a's VRAM: on two devices through the peer path.
		bdev := dev
		if a != b {
			bdev, err = b.Alloc(plugin.MemDevice, n)
			require.NoError(t, err)
			require.NoError(t, b.CopyPeer(bdev, b, dev, a, n, qb))
		}
		require.NoError(t, b.Copy(dst, bdev, n, plugin.DeviceToHost, qb))
		done, err := ev.Query()
		require.NoError(t, err)
		require.False(t, done, "the event completed while a's work is held")
		// With no delay every copy is due at once: the gate alone holds them.
		hsaGate(t, "copy", false)
		require.NoError(t, qb.Synchronize())
		require.Equal(t, want, cmem.Bytes(dst, n), "b's copy read a's buffer before a's work completed (%v then %v)", a.index, b.index)
		done, err = ev.Query()
		require.NoError(t, err)
		require.True(t, done)
		require.NoError(t, ev.Destroy())
		require.NoError(t, qa.Destroy())
		require.NoError(t, qb.Destroy())
		if bdev != dev {
			require.NoError(t, b.Free(plugin.MemDevice, bdev))
		}
		require.NoError(t, a.Free(plugin.MemDevice, dev))
	}
}
