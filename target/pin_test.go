package target

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// global is linker-allocated: it never moves, so Pin accepts it.
var global [1 << 16]byte

func TestPinRefusals(t *testing.T) {
	withPlugins(t)
	host := InitialDevice()

	_, err := Pin([]*int{new(int)}, host)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "pin a []*int: invalid argument: the type holds Go pointers")

	_, err = Pin([]float32{}, host)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "nothing to pin")

	_, err = Pin(make([]byte, 64), host+1)
	require.ErrorIs(t, err, ErrBadDevice)

	// A goroutine stack, reached through a uintptr (the only way: a slice
	// Pin keeps is moved to the heap by the compiler).
	var onStack [4096]byte
	p := uintptr(unsafe.Pointer(&onStack[0]))
	_, err = Pin(cmem.Bytes(p, 4096), host)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "a goroutine stack, which Go moves, or foreign C memory")
	runtime.KeepAlive(&onStack)

	// Foreign C memory (mapped behind ompalloc's back).
	c := hostMem(t, 1<<16)
	_, err = Pin(cmem.Bytes(c, 1<<16), host)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "pin C memory with Device.LockMem")
	d, _ := Get(host)
	require.Zero(t, d.Registry().Stats().Entries, "nothing locked by a refused pin")
}

func TestPinGoHeapSlice(t *testing.T) {
	withPlugins(t)
	host := InitialDevice()
	d, _ := Get(host)

	xs := make([]float64, 1<<16) // 512 KiB
	require.False(t, IsPinned(xs))
	h, err := Pin(xs, host)
	if err != nil {
		t.Skipf("the host device cannot lock 512 KiB here: %v", err)
	}
	require.True(t, IsPinned(xs))
	require.True(t, IsPinned(xs[100:200]), "a part of a pinned slice is pinned")
	require.Equal(t, []int{host}, h.Devices())
	require.Equal(t, 1, d.Registry().Stats().Entries)

	// Nesting: a sub-slice only adds a reference, as llvm_omp_target_lock_mem.
	calls := d.Registry().Stats().VendorLocks
	h2, err := Pin(xs[1000:2000], host)
	require.NoError(t, err)
	require.Equal(t, calls, d.Registry().Stats().VendorLocks, "no second lock")
	require.NoError(t, h.Unpin())
	require.True(t, IsPinned(xs), "the nested pin keeps the lock")
	require.NoError(t, h2.Close())
	require.False(t, IsPinned(xs))
	require.Zero(t, d.Registry().Stats().Entries)

	err = h.Unpin()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "already unpinned")
	require.NoError(t, h.Close(), "Close of an unpinned handle is not an error")

	// A global works too.
	hg, err := Pin(global[:], host)
	require.NoError(t, err)
	require.True(t, IsPinned(global[:]))
	require.NoError(t, hg.Unpin())
}

// pinOnly pins a fresh slice and returns the handle, the slice's only
// reference, and a weak pointer to watch the slice with.
func pinOnly(t *testing.T, dev int) (*Pinned, weak.Pointer[[1 << 16]byte]) {
	s := new([1 << 16]byte)
	s[0], s[len(s)-1] = 1, 2
	h, err := Pin(s[:], dev)
	require.NoError(t, err)
	return h, weak.Make(s)
}

func TestPinKeepsTheObjectReachable(t *testing.T) {
	withPlugins(t)
	host := InitialDevice()
	h, wp := pinOnly(t, host)
	for range 3 {
		runtime.GC()
	}
	s := wp.Value()
	require.NotNil(t, s, "a slice whose only reference is the pin was collected")
	require.Equal(t, byte(2), s[len(s)-1])
	require.True(t, IsPinned(s[:]))
	s = nil
	require.NoError(t, h.Unpin())
	runtime.KeepAlive(h)
	gone := false
	for range 20 {
		runtime.GC()
		if wp.Value() == nil {
			gone = true
			break
		}
	}
	require.True(t, gone, "Unpin lets the object go")
}

func TestPinDroppedHandleIsUnpinned(t *testing.T) {
	withPlugins(t)
	host := InitialDevice()
	d, _ := Get(host)
	warned := captureWarnings(t)
	_, wp := pinOnly(t, host) // the handle is dropped at once
	require.Equal(t, 1, d.Registry().Stats().Entries)
	deadline := time.Now().Add(10 * time.Second)
	for d.Registry().Stats().Entries != 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Zero(t, d.Registry().Stats().Entries, "the cleanup of a dropped handle unpins")
	// Issue 31 item 4: and says so through the warning hook, as a Buffer does.
	w := warned()
	require.Contains(t, w, "ompalloc: warning: ")
	require.Contains(t, w, "a slice pinned by target.Pin (65536 bytes at")
	require.Contains(t, w, "became unreachable without Unpin")
	_ = wp
}

func TestPinAllDevicesAndOmpallocMemory(t *testing.T) {
	a, b := newFake("a", 0), newFake("b", 0)
	withPlugins(t, &fakePlugin{name: "fake", impls: []plugin.Impl{a, b}})
	t.Cleanup(a.release)
	t.Cleanup(b.release)

	xs := make([]int32, 1<<14)
	h, err := Pin(xs, AllDevices)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, h.Devices(), "every accelerator, not the host")
	for dev := range 2 {
		d, _ := Get(dev)
		require.True(t, d.pinned(uintptr(unsafe.Pointer(&xs[0])), 1<<16))
	}
	require.NoError(t, h.Unpin())
	require.Empty(t, a.locks, "unlocked on a")
	require.Empty(t, b.locks, "unlocked on b")

	// A failure on the second device undoes the first.
	b.failLock.Store(true)
	_, err = Pin(xs, AllDevices)
	require.ErrorIs(t, err, errInjected)
	require.Empty(t, a.locks, "the first device's lock undone")
	b.failLock.Store(false)

	// Memory ompalloc knows (here: locked for device 0 with LockMem) is not
	// Go memory, and a pin inside it nests.
	d0, _ := Get(0)
	c := hostMem(t, 1<<16)
	_, err = d0.LockMem(c, 1<<16)
	require.NoError(t, err)
	hc, err := Pin(cmem.Bytes(c+4096, 4096), 0)
	require.NoError(t, err)
	e, ok := d0.Registry().Entry(c)
	require.True(t, ok)
	require.Equal(t, 2, e.Refs)
	require.NoError(t, hc.Unpin())
	require.NoError(t, d0.UnlockMem(c))
	_, ok = d0.Registry().Entry(c)
	require.False(t, ok)
}
