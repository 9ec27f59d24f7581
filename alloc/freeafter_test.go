package alloc

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// TestFreeAfterFakeDrivers runs TestFreeAfterChild in a child process whose
// CUDA and HSA plugins load the fake drivers, which perform async copies
// 200 ms after they were submitted: a pinned block freed right after
// submitting a copy from or to it is still read or written by that copy.
// Where a check needs the copy in flight at the Free, the subtest holds it
// at the fake's gate (holdDeviceWork): the delay alone can pass before the
// Free on a loaded machine (it did, under qemu in CI).
func TestFreeAfterFakeDrivers(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreeAfterChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=freeafter",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=1", "FAKECUDA_COPY_DELAY_US=200000",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=1", "FAKEHSA_COPY_DELAY_US=200000")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestFreeAfterChild", "%s", out)
}

// holdDeviceWork closes the fake driver's gate in front of its queued work
// (fakecuda "stream", fakehsa "copy") until the returned open, also run at
// cleanup: that work stays pending however slow the host is.
func holdDeviceWork(t *testing.T, plug string) (open func()) {
	t.Helper()
	lib, setName, gate := os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_gate", "stream"
	if plug == "amdgpu" {
		lib, setName, gate = os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_gate", "copy"
	}
	l, err := dl.Open(dl.Spec{Name: "fake driver", Candidates: []string{lib}})
	require.NoError(t, err)
	set, err := l.Sym(setName)
	require.NoError(t, err)
	name := append([]byte(gate), 0)
	dlcall.Call(set, uintptr(unsafe.Pointer(&name[0])), 1)
	var once sync.Once
	open = func() { once.Do(func() { dlcall.Call(set, uintptr(unsafe.Pointer(&name[0])), 0) }) }
	t.Cleanup(open)
	return open
}

func TestFreeAfterChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "freeafter" {
		t.Skip("run by TestFreeAfterFakeDrivers")
	}
	var accels []*target.Device
	for _, d := range target.Devices() {
		if !d.IsHost() {
			accels = append(accels, d)
		}
	}
	require.Len(t, accels, 2, "one fake CUDA device, one fake AMD GPU")
	const n = 4096
	for _, d := range accels {
		t.Run(d.Plugin(), func(t *testing.T) {
			a, err := New(memspace.Default, WithPinned(true), WithPinDevice(d.ID))
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Destroy()) }()
			devMem, err := target.AllocArray[byte](d, target.MemDevice, n)
			require.NoError(t, err)
			defer func() { require.NoError(t, devMem.Free()) }()
			dev := uintptr(devMem.Pointer())
			q, err := d.NewQueue()
			require.NoError(t, err)
			defer func() { require.NoError(t, q.Close()) }()
			block := func() []byte {
				p, err := a.Alloc(n)
				require.NoError(t, err)
				return cmem.Bytes(uintptr(p), n)
			}
			fill := func(b []byte, seed byte) []byte {
				for i := range b {
					b[i] = byte(i*13) + seed
				}
				return append([]byte(nil), b...)
			}
			ptr := func(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

			t.Run("free right after a copy from it", func(t *testing.T) {
				src := block()
				want := fill(src, 1)
				// Held at the gate, not only late: on a loaded machine the
				// fake's delay can pass before Free, which then frees at
				// once (correctly) and the checks below would not hold.
				open := holdDeviceWork(t, d.Plugin())
				require.NoError(t, target.MemcpyAsync(dev, uintptr(ptr(src)), n, d.ID, target.InitialDevice(), q))
				require.NoError(t, Free(ptr(src)), "freed while the copy reads it")
				next := block() // the heap would hand the same slot out again
				fill(next, 2)
				open()
				require.NoError(t, q.Synchronize(context.Background()))
				back := make([]byte, n)
				require.NoError(t, target.Memcpy(uintptr(unsafe.Pointer(&back[0])), dev, n, target.InitialDevice(), d.ID))
				require.True(t, bytes.Equal(want, back), "the device got what the block held when the copy was submitted")
				_, err := blockSize(ptr(src))
				require.ErrorIs(t, err, ErrDoubleFree, "freed once the copy completed")
				require.NoError(t, Free(ptr(next)))
			})

			t.Run("free right after a copy into it", func(t *testing.T) {
				staging := block()
				want := fill(staging, 3)
				require.NoError(t, target.Memcpy(dev, uintptr(ptr(staging)), n, d.ID, target.InitialDevice()))
				dst := block()
				open := holdDeviceWork(t, d.Plugin())
				require.NoError(t, target.MemcpyAsync(uintptr(ptr(dst)), dev, n, target.InitialDevice(), d.ID, q))
				require.NoError(t, Free(ptr(dst)), "freed while the copy writes it")
				next := block()
				mine := fill(next, 4)
				open()
				require.NoError(t, q.Synchronize(context.Background()))
				require.True(t, bytes.Equal(mine, next), "the late copy did not write into the next block")
				require.NotEqual(t, want, mine)
				require.NoError(t, Free(ptr(next)))
				require.NoError(t, Free(ptr(staging)))
			})

			t.Run("FreeAfter", func(t *testing.T) {
				src := block()
				want := fill(src, 5)
				open := holdDeviceWork(t, d.Plugin())
				require.NoError(t, target.MemcpyAsync(dev, uintptr(ptr(src)), n, d.ID, target.InitialDevice(), q))
				require.NoError(t, FreeAfter(ptr(src), q))
				require.ErrorIs(t, Free(ptr(src)), ErrDoubleFree, "its free already waits")
				require.ErrorIs(t, FreeAfter(ptr(src), q), ErrDoubleFree)
				next := block()
				fill(next, 6)
				n0 := a.Stats().BlocksLive
				done, err := q.Query()
				require.NoError(t, err)
				require.False(t, done, "the copy runs late (held)")
				require.Equal(t, n0, a.Stats().BlocksLive, "still allocated")
				open()
				require.NoError(t, q.Synchronize(context.Background()))
				require.Equal(t, n0-1, a.Stats().BlocksLive, "freed by the Synchronize that found the copy done")
				back := make([]byte, n)
				require.NoError(t, target.Memcpy(uintptr(unsafe.Pointer(&back[0])), dev, n, target.InitialDevice(), d.ID))
				require.True(t, bytes.Equal(want, back), "src %p next %p want %x got %x", ptr(src), ptr(next), want[:8], back[:8])
				require.NoError(t, Free(ptr(next)))
			})

			// Issue 27 item 2: a typed slice freed behind a queue, with no
			// unsafe.Pointer in the caller's code.
			t.Run("FreeSliceAfter", func(t *testing.T) {
				xs, err := Make[float32](a, n/4)
				require.NoError(t, err)
				for i := range xs {
					xs[i] = float32(i)
				}
				open := holdDeviceWork(t, d.Plugin())
				arr, err := target.AllocArray[float32](d, target.MemDevice, n/4)
				require.NoError(t, err)
				defer func() { require.NoError(t, arr.Free()) }()
				require.NoError(t, target.CopyToDevice(arr, xs, q))
				n0 := a.Stats().BlocksLive
				require.NoError(t, FreeSliceAfter(xs, q))
				require.ErrorIs(t, FreeSliceAfter(xs, q), ErrDoubleFree, "its free already waits")
				require.Equal(t, n0, a.Stats().BlocksLive, "still allocated while the copy is held")
				open()
				require.NoError(t, q.Synchronize(context.Background()))
				require.Equal(t, n0-1, a.Stats().BlocksLive, "freed once the copy completed")
				back := make([]float32, n/4)
				require.NoError(t, target.CopyFromDevice(back, arr, nil))
				require.Equal(t, float32(n/4-1), back[n/4-1])
				require.NoError(t, FreeSliceAfter([]float32(nil), q), "an empty slice is a no-op")
				require.ErrorIs(t, FreeSliceAfter(make([]float32, 4), q), ErrInvalidPointer, "Go memory")
			})

			t.Run("FreeAfter whose query fails", func(t *testing.T) {
				if d.Plugin() != "cuda" {
					t.Skip("the failure is injected into the fake libcuda")
				}
				src := block()
				fill(src, 7)
				require.NoError(t, target.MemcpyAsync(dev, uintptr(ptr(src)), n, d.ID, target.InitialDevice(), q))
				n0 := a.Stats().BlocksLive
				t.Setenv("FAKECUDA_FAIL", "cuStreamQuery")
				require.NoError(t, FreeAfter(ptr(src), q), "taken by the queue: an error would make the caller free it twice")
				require.ErrorIs(t, Free(ptr(src)), ErrDoubleFree, "its free waits for the queue")
				require.NoError(t, os.Unsetenv("FAKECUDA_FAIL"))
				require.Equal(t, n0, a.Stats().BlocksLive)
				require.NoError(t, q.Synchronize(context.Background()))
				require.Equal(t, n0-1, a.Stats().BlocksLive, "freed once, by the Synchronize")
			})

			// Issue 22, item 2: the operation first, then the cause (was
			// "device error: allocator#...: free of 0x...: ...").
			t.Run("a device free the driver refuses", func(t *testing.T) {
				if d.Plugin() != "cuda" {
					t.Skip("the failure is injected into the fake libcuda")
				}
				th := mustNew(t, memspace.TargetHost, WithTrait(traits.PreferredDevice, uintptr(d.ID)), WithFallback(traits.NullFb))
				p, err := th.Alloc(n)
				require.NoError(t, err)
				t.Setenv("FAKECUDA_FAIL", "cuMemFreeHost")
				err = Free(p)
				require.NoError(t, os.Unsetenv("FAKECUDA_FAIL"))
				require.ErrorIs(t, err, ErrDevice)
				msg := err.Error()
				t.Log(msg)
				require.True(t, strings.HasPrefix(msg, fmt.Sprintf("Free(%p) of %v: %v: ", p, th, ErrDevice)), "%s", msg)
				require.Equal(t, 1, strings.Count(msg, ErrDevice.Error()), "%s", msg)
				require.Equal(t, 1, strings.Count(msg, th.String()), "%s", msg)
			})

			t.Run("nothing in flight frees at once", func(t *testing.T) {
				p := block()
				require.NoError(t, q.Synchronize(context.Background()))
				n0 := a.Stats().BlocksLive
				require.NoError(t, FreeAfter(ptr(p), q))
				require.Equal(t, n0-1, a.Stats().BlocksLive)
			})
		})
	}
	require.ErrorIs(t, FreeAfter(unsafe.Pointer(new([64]byte)), nil), ErrInvalidArgument)
	q, err := accels[0].NewQueue()
	require.NoError(t, err)
	require.ErrorIs(t, FreeAfter(unsafe.Pointer(new([64]byte)), q), ErrInvalidPointer, "a Go pointer")
	require.NoError(t, q.Close())

	// A free still waiting on a queue at Shutdown is done by Shutdown, which
	// then finds no live pinned block. The copies are held at the fakes'
	// gates until Shutdown, so that they are in flight at every Free however
	// slow the host.
	var opens []func()
	for _, d := range accels {
		opens = append(opens, holdDeviceWork(t, d.Plugin()))
		a, err := New(memspace.Default, WithPinned(true), WithPinDevice(d.ID))
		require.NoError(t, err)
		p, err := a.Alloc(n)
		require.NoError(t, err)
		dev, err := d.Alloc(target.MemDevice, n)
		require.NoError(t, err)
		q, err := d.NewQueue()
		require.NoError(t, err)
		require.NoError(t, target.MemcpyAsync(dev, uintptr(p), n, d.ID, target.InitialDevice(), q))
		require.NoError(t, Free(p))
		require.Equal(t, int64(1), a.Stats().BlocksLive, "waits for the copy")
		_ = dev // Shutdown frees it, after the copy
		t.Cleanup(func() { require.NoError(t, a.Destroy()) })
	}
	for _, open := range opens {
		open()
	}
	require.NoError(t, target.Shutdown())
	require.Zero(t, deferredFrees.Load())
	require.Zero(t, deferredFailures.Load())
	require.False(t, device.HostInUse())
}

// TestFreeAfterCrossDevice runs TestFreeAfterCrossDeviceChild with two fake
// CUDA devices whose async copies land 200 ms late.
func TestFreeAfterCrossDevice(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreeAfterCrossDeviceChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=crossdevice", "OMPALLOC_DISABLE_HSA=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=200000")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestFreeAfterCrossDeviceChild", "%s", out)
}

// A block of device 0's pinned heap is registered PORTABLE: a copy on a
// queue of device 1 into it is late like any pinned copy, so a Free right
// after submitting must not hand the slot out again before the copy landed.
func TestFreeAfterCrossDeviceChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "crossdevice" {
		t.Skip("run by TestFreeAfterCrossDevice")
	}
	d0, err := target.Get(0)
	require.NoError(t, err)
	d1, err := target.Get(1)
	require.NoError(t, err)
	require.Equal(t, "cuda", d0.Plugin())
	require.Equal(t, "cuda", d1.Plugin())
	const n = 4096
	a, err := New(memspace.Default, WithPinned(true), WithPinDevice(d0.ID))
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Destroy()) }()
	dev, err := d1.Alloc(target.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d1.Free(target.MemDevice, dev)) }()
	q, err := d1.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	block := func() []byte {
		p, err := a.Alloc(n)
		require.NoError(t, err)
		return cmem.Bytes(uintptr(p), n)
	}
	ptr := func(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
	fill := func(b []byte, seed byte) []byte {
		for i := range b {
			b[i] = byte(i*13) + seed
		}
		return append([]byte(nil), b...)
	}

	src := make([]byte, n)
	fill(src, 1)
	require.NoError(t, target.Memcpy(dev, uintptr(unsafe.Pointer(&src[0])), n, d1.ID, target.InitialDevice()))
	dst := block()
	open := holdDeviceWork(t, "cuda") // in flight at the Free however slow the host
	require.NoError(t, target.MemcpyAsync(uintptr(ptr(dst)), dev, n, target.InitialDevice(), d1.ID, q))
	require.NoError(t, Free(ptr(dst)), "freed while device 1's copy writes it")
	next := block() // the heap would hand the same slot out again
	mine := fill(next, 2)
	open()
	require.NoError(t, q.Synchronize(context.Background()))
	require.True(t, bytes.Equal(mine, next), "the late copy on device 1 wrote into the next block")
	_, err = blockSize(ptr(dst))
	if &dst[0] != &next[0] {
		require.ErrorIs(t, err, ErrDoubleFree, "freed once the copy completed")
	}
	require.NoError(t, Free(ptr(next)))
}
