package target

import (
	"context"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/require"
)

// Issue 27 item 1: Pin(s), CopyFromDevice(s, arr, q), Unpin(), and no other
// reference to s: the queued copy held nothing (a Pin'ed slice counted as
// ompalloc's memory), and Unpin dropped the lock and the object at once,
// so the garbage collector could reuse the memory the copy was about to
// write, on memory no longer locked. Now the copy keeps the object until
// its queue passed it, and Unpin returns at once but unlocks behind it.
func TestQueuedCopyKeepsUnpinnedSlice(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 1 << 16
	arr, err := AllocArray[byte](d, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, arr.Free()) })
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })

	for _, tc := range []struct {
		name string
		copy func(s []byte) error
	}{
		{"from device", func(s []byte) error { return CopyFromDevice(s, arr, q) }},
		{"to device", func(s []byte) error { return CopyToDevice(arr, s, q) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, wp := pinOnly(t, d.ID)
			p := uintptr(unsafe.Pointer(wp.Value()))
			f.holdWork()
			t.Cleanup(f.release)
			s := wp.Value()
			require.NoError(t, tc.copy(s[:]))
			s = nil
			require.NoError(t, h.Unpin(), "returns at once: the copy is queued")
			runtime.KeepAlive(h)
			require.True(t, d.pinned(p, n), "the lock stays while the copy is queued")
			require.True(t, f.isLocked(p))
			for range 3 {
				runtime.GC()
			}
			require.NotNil(t, wp.Value(), "the queued copy keeps the Go object")
			done, err := q.Query()
			require.NoError(t, err)
			require.False(t, done)

			f.release()
			require.NoError(t, q.Synchronize(context.Background()))
			require.False(t, d.pinned(p, n), "unlocked once the queue passed the copy")
			require.False(t, f.isLocked(p))
			gone := false
			for range 20 {
				runtime.GC()
				if wp.Value() == nil {
					gone = true
					break
				}
			}
			require.True(t, gone, "and the object goes")
			require.ErrorContains(t, h.Unpin(), "already unpinned")
			require.NoError(t, h.Close())
		})
	}
}

// Every queued copy of Go memory keeps its object until its queue passed
// it, also when a registry knows the memory (here Go memory locked with
// LockMem behind Pin's back, which holdHost took for ompalloc's own and did
// not hold).
func TestQueuedCopyKeepsLockedGoMemory(t *testing.T) {
	f, d := withFake(t, 0)
	const n = 1 << 16
	arr, err := AllocArray[byte](d, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, arr.Free()) })
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	s := new([n]byte)
	wp := weak.Make(s)
	p := uintptr(unsafe.Pointer(s))
	_, err = d.LockMem(p, n)
	require.NoError(t, err)
	f.holdWork()
	t.Cleanup(f.release)
	require.NoError(t, CopyFromDevice(s[:], arr, q))
	s = nil
	for range 3 {
		runtime.GC()
	}
	require.NotNil(t, wp.Value(), "the queued copy keeps the Go object")
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	require.NoError(t, d.UnlockMem(p))
	gone := false
	for range 20 {
		runtime.GC()
		if wp.Value() == nil {
			gone = true
			break
		}
	}
	require.True(t, gone, "the queue let it go")
}

// Issue 27 item 4: with the driver refusing the unlock (the lock kept:
// ErrStillLocked, as HSA's), the registry kept its entry but the
// handle had dropped its Pinner and reference: a second Unpin said
// "already unpinned" and Close returned nil. The handle now keeps
// everything until the unlock succeeded.
func TestFailedUnpinCanBeRetried(t *testing.T) {
	f, d := withFake(t, 0)
	h, wp := pinOnly(t, d.ID)
	p := uintptr(unsafe.Pointer(wp.Value()))
	f.failUnlock.Store(true)
	t.Cleanup(func() { f.failUnlock.Store(false) })

	err := h.Unpin()
	require.ErrorIs(t, err, errInjected)
	require.ErrorIs(t, err, ErrStillLocked)
	e, ok := d.Registry().Entry(p)
	require.True(t, ok)
	require.Equal(t, 1, e.Refs)
	require.Equal(t, []int{d.ID}, h.Devices(), "still pinned for the device")
	for range 3 {
		runtime.GC()
	}
	require.NotNil(t, wp.Value(), "the handle keeps the object while it is locked")
	require.ErrorIs(t, h.Close(), ErrStillLocked, "Close reports the unlock failing again")

	f.failUnlock.Store(false)
	require.NoError(t, h.Unpin(), "a retry unlocks")
	require.False(t, d.pinned(p, 1))
	require.Empty(t, h.Devices())
	require.ErrorContains(t, h.Unpin(), "already unpinned")
	require.NoError(t, h.Close())
	runtime.KeepAlive(h)
}

func (f *fakeImpl) isLocked(p uintptr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.locks[p]
	return ok
}
