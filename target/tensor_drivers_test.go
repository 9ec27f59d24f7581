package target

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const tensorChildEnv = "OMPALLOC_TARGET_TENSOR_CHILD"

type long = uintptr // a C long the fake's hooks return (amd64, arm64)

// TestTensorFakeDrivers runs TestTensorFakeDriversChild in a child process
// whose CUDA and HSA plugins load the fake C drivers (devices 0 and 1 are
// CUDA, 2 and 3 AMD, 4 the host; copies performed late by driver threads):
// pinning Go memory, typed copies, events and pools against both.
func TestTensorFakeDrivers(t *testing.T) {
	if os.Getenv(tensorChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTensorFakeDriversChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(),
		tensorChildEnv+"=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=300",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=2", "FAKEHSA_COPY_DELAY_US=300",
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestTensorFakeDriversChild", "%s", out)
	t.Logf("%s", out)
}

func TestTensorFakeDriversChild(t *testing.T) {
	if os.Getenv(tensorChildEnv) == "" {
		t.Skip("run by TestTensorFakeDrivers")
	}
	require.Equal(t, 4, NumDevices())
	for _, s := range Plugins() {
		require.NoError(t, s.Err, "%s: %s", s.Plugin, s.Init)
	}
	t.Run("pin", tensorPin)
	for _, pair := range [][2]int{{0, 0}, {0, 1}, {2, 2}, {2, 3}} {
		a, _ := Get(pair[0])
		b, _ := Get(pair[1])
		t.Run(fmt.Sprintf("events/%v then %v", a, b), func(t *testing.T) { tensorEvents(t, a, b) })
	}
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		t.Run(fmt.Sprintf("pool/%v", d), func(t *testing.T) { tensorPool(t, d) })
	}
}

// tensorPool: the device pool against a driver. What a cached block saves
// against the driver's own alloc+free is measured by ompalloc bench
// (device_alloc), not asserted here: timing is no unit test's to check.
func tensorPool(t *testing.T, d *Device) {
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	p, err := d.PoolAlloc(1<<20, q)
	require.NoError(t, err)
	arr, err := arrayOf[byte](memory{Device: d, Kind: MemDevice, Addr: p, Size: 1 << 20})
	require.NoError(t, err)
	src := make([]byte, 1<<20)
	src[1<<20-1] = 5
	// The size-class cache's own ordering rule, checked with q's copy held
	// pending at the fake's gate: another user does not get the block.
	// (The driver's pool may hand the same address to another stream with
	// a dependency on q's work inserted, which CUDA's pools allow: there
	// the check can only be made once q's work is seen pending.)
	sizeClass := !d.poolStats().DriverPool
	release := func() {}
	if sizeClass {
		release = holdWork(t, d)
	}
	require.NoError(t, CopyToDevice(arr, src, q))
	require.NoError(t, d.PoolFree(p, q))
	other, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	if ok, _ := q.Query(); sizeClass || !ok {
		require.NotEqual(t, p, other, "reused by another user while the copy on q may still run")
	}
	require.NoError(t, d.PoolFree(other, nil))
	release()
	require.NoError(t, q.Synchronize(context.Background()))
	st := d.poolStats()
	require.Zero(t, st.InUse)
	require.NotZero(t, st.Reserved)

	require.NoError(t, q.Synchronize(context.Background())) // the last block freed waits for q's (empty) work until q is asked
	// A driver pool gives back a free once the host observed it complete.
	require.Eventually(t, func() bool {
		reserved := d.poolStats().Reserved
		return d.TrimPool(0) == reserved && d.poolStats().Reserved == 0
	}, 10*time.Second, time.Millisecond)
}

// longWork queues chunks copies of 64 KiB from a pinned Go slice into dst
// on q (each performed late by the fake: 300 us apiece) and returns the
// bytes copied.
func longWork(t *testing.T, q *Queue, dst Array[byte], chunks int, seed byte) []byte {
	t.Helper()
	src := make([]byte, dst.Len())
	for i := range src {
		src[i] = byte(i*13) + seed
	}
	pin, err := Pin(src, q.Device().ID)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pin.Close()) })
	step := dst.Len() / chunks
	for i := 0; i < chunks; i++ {
		part, err := dst.Slice(i*step, (i+1)*step)
		require.NoError(t, err)
		require.NoError(t, CopyToDevice(part, src[i*step:(i+1)*step], q))
	}
	return src
}

// holdWork keeps the devices of d's fake driver busy: its workers perform
// no queued copy, event record or event wait (fakecuda's gate "stream",
// fakehsa's "copy") until the returned release, also run at cleanup so that
// a failure never leaves later tests waiting. Queued work then stays
// pending however slow the host is (a loaded machine, -race), as on a
// device busy with other work: the driver promises only its order, not
// when it completes.
func holdWork(t *testing.T, d *Device) (release func()) {
	lib, fn, name := os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_gate", "copy"
	if d.Plugin() == "cuda" {
		lib, fn, name = os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_gate", "stream"
	}
	gate := hook(t, lib, fn)
	b := append([]byte(name), 0)
	set := func(closed uintptr) {
		dlcall.Call(gate, uintptr(unsafe.Pointer(&b[0])), closed)
		runtime.KeepAlive(b)
	}
	set(1)
	var once sync.Once
	release = func() { once.Do(func() { set(0) }) }
	t.Cleanup(release)
	return release
}

// returns runs f, which must not wait for the device held by holdWork: a
// call still blocked after 10 s fails the test (and release lets it end)
// rather than hanging it.
func returns(t *testing.T, release func(), what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(10 * time.Second):
		release()
		require.NoError(t, <-done, what)
		t.Fatalf("%s blocked the host until the queued work completed", what)
	}
}

// tensorEvents orders a queue of b after a queue of a with an event: b's
// copy of a's buffer waits for a's long work without blocking the host,
// and reads what a wrote (without the wait it would read zeros: fakecuda
// performs b's copy after 300 us, a's work takes 40 times that; fakehsa's
// engines perform the held copies newest first unless signals order them,
// so b's copy would run before a's first chunk: seen failing with the
// event's dependency taken out of the HSA plugin's wait marker). The fake
// devices are held busy (holdWork) while the test checks that the work is
// still pending, so those checks hold on a host of any speed.
func tensorEvents(t *testing.T, a, b *Device) {
	const chunks, n = 40, 40 << 16
	bufA, err := AllocArray[byte](a, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, bufA.Free()) })
	bufB, err := AllocArray[byte](b, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, bufB.Free()) })
	qa, err := a.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, qa.Close()) })
	qb, err := b.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, qb.Close()) })

	start, err := a.NewEvent(true)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, start.Close()) })
	end, err := a.NewEvent(true)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, end.Close()) })
	_, err = Elapsed(start, end)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "never recorded")
	ok, err := end.Query()
	require.NoError(t, err)
	require.True(t, ok, "an event never recorded is complete")

	release := holdWork(t, a)
	require.NoError(t, start.Record(qa))
	want := longWork(t, qa, bufA, chunks, 7)
	require.NoError(t, end.Record(qa))

	// The host must not wait: on CUDA no synchronizing call is made (the
	// fake counts calls); anywhere, WaitEvent returns while a's work is held.
	var hostWaits func() long
	if a.Plugin() == "cuda" {
		calls := hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_calls")
		hostWaits = func() long {
			var n long
			for _, name := range []string{"cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize"} {
				b := append([]byte(name), 0)
				n += long(dlcall.Call(calls, uintptr(unsafe.Pointer(&b[0]))))
			}
			return n
		}
	}
	var before long
	if hostWaits != nil {
		before = hostWaits()
	}
	returns(t, release, "WaitEvent", func() error { return qb.WaitEvent(end) })
	if hostWaits != nil {
		require.Equal(t, before, hostWaits(), "WaitEvent synchronized on the host")
	}
	ok, err = end.Query()
	require.NoError(t, err)
	require.False(t, ok, "the event completed while a's work is held")
	_, err = Elapsed(start, end)
	require.ErrorIs(t, err, ErrNotReady, "an event not complete yet cannot be timed")

	// Ordered after a's work by the event only.
	returns(t, release, "CopyArray", func() error { return CopyArray(bufB, bufA, qb) })
	release()
	back := make([]byte, n)
	require.NoError(t, CopyFromDevice(back, bufB, qb))
	require.NoError(t, qb.Synchronize(context.Background()))
	require.Equal(t, want, back, "the copy on the waiting queue read a's buffer before a's work completed")
	ok, err = end.Query()
	require.NoError(t, err)
	require.True(t, ok)

	el, err := Elapsed(start, end)
	require.NoError(t, err)
	if a.Plugin() == "cuda" {
		require.Greater(t, el, time.Duration(chunks)*250*time.Microsecond, "the work between the events takes 40 x 300 us in the fake")
	} else {
		// fakehsa's copies were all due while held: once let go they run
		// back to back, so only the order of the two markers is known.
		require.Positive(t, el, "the end marker completes after the start one")
	}
	plain, err := a.NewEvent(false)
	require.NoError(t, err)
	require.NoError(t, plain.Record(qa))
	require.NoError(t, plain.Synchronize(context.Background()))
	_, err = Elapsed(start, plain)
	require.ErrorIs(t, err, ErrInvalidArgument, "an event without timing")
	require.NoError(t, plain.Close())

	// Cancellation: the wait gives up while the device is busy, the queue
	// stays usable.
	release = holdWork(t, a)
	longWork(t, qa, bufA, chunks, 9)
	require.NoError(t, end.Record(qa))
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	require.ErrorIs(t, qa.Synchronize(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, end.Synchronize(ctx), context.DeadlineExceeded)
	cancel()
	ok, err = end.Query()
	require.NoError(t, err)
	require.False(t, ok, "the work is held: the event cannot be complete")
	release()
	require.NoError(t, end.Synchronize(context.Background()))
	require.NoError(t, qa.Synchronize(context.Background()))
	one := make([]byte, n)
	require.NoError(t, CopyFromDevice(one, bufA, qa))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	require.NoError(t, qa.Synchronize(ctx2))
	require.Equal(t, byte(9), one[0])
}

// tensorPin pins Go heap slices for one GPU of each vendor and for all of
// them; copies from the pinned slice take the one-step pinned path, and
// IsPinned sees a lock made behind ompalloc's back through either driver.
func tensorPin(t *testing.T) {
	xs := make([]float32, 1<<18) // 1 MiB
	for i := range xs {
		xs[i] = float32(i)
	}
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		require.False(t, IsPinned(xs))
		h, err := Pin(xs, dev)
		require.NoError(t, err, "%v", d)
		require.True(t, IsPinned(xs), "%v", d)
		require.True(t, d.pinned(uintptr(unsafe.Pointer(&xs[0])), 1<<20))

		// A queued copy reads the pinned Go memory late, with no staging.
		buf, err := AllocArray[float32](d, MemDevice, len(xs))
		require.NoError(t, err)
		q, err := d.NewQueue()
		require.NoError(t, err)
		staged := d.StagingStats().Misses + d.StagingStats().Hits
		require.NoError(t, CopyToDevice(buf, xs, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.Equal(t, staged, d.StagingStats().Misses+d.StagingStats().Hits, "no staging for pinned memory")
		back := make([]float32, len(xs))
		require.NoError(t, CopyFromDevice(back, buf, nil))
		require.Equal(t, xs, back)
		require.NoError(t, q.Close())
		require.NoError(t, buf.Free())

		require.NoError(t, h.Unpin())
		require.False(t, IsPinned(xs), "%v", d)
		require.Zero(t, d.Registry().Stats().Entries)
	}

	// Issue 27 item 1: Unpin with a copy into the slice still queued (the
	// drivers' workers held) returns at once and unlocks behind the copy.
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		ys := make([]float32, 1<<14)
		h, err := Pin(ys, dev)
		require.NoError(t, err)
		buf, err := AllocArray[float32](d, MemDevice, len(ys))
		require.NoError(t, err)
		want := make([]float32, len(ys))
		for i := range want {
			want[i] = float32(i + dev)
		}
		require.NoError(t, CopyToDevice(buf, want, nil))
		q, err := d.NewQueue()
		require.NoError(t, err)
		release := holdWork(t, d)
		require.NoError(t, CopyFromDevice(ys, buf, q))
		returns(t, release, "Unpin", h.Unpin)
		require.True(t, IsPinned(ys), "%v: locked while the copy into it is queued", d)
		release()
		require.NoError(t, q.Synchronize(context.Background()))
		require.False(t, IsPinned(ys), "%v: unlocked behind the copy", d)
		require.Equal(t, want, ys)
		require.NoError(t, q.Close())
		require.NoError(t, buf.Free())
	}

	// Issue 27 item 11: two small slices sharing a page pin on both
	// drivers (CUDA refused the second with 712), and copies of them land.
	small := make([]float32, 1024) // one 4 KiB object: a page of its own
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		h1, err := Pin(small[:16], dev)
		require.NoError(t, err, "%v", d)
		h2, err := Pin(small[32:48], dev)
		require.NoError(t, err, "%v: a second small slice in the page", d)
		buf, err := AllocArray[float32](d, MemDevice, 16)
		require.NoError(t, err)
		want := make([]float32, 16)
		for i := range want {
			want[i] = float32(dev*100 + i)
		}
		require.NoError(t, CopyToDevice(buf, want, nil))
		q, err := d.NewQueue()
		require.NoError(t, err)
		require.NoError(t, CopyFromDevice(small[32:48], buf, q))
		require.NoError(t, CopyFromDevice(small[:16], buf, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.Equal(t, want, small[32:48])
		require.Equal(t, want, small[:16])
		require.NoError(t, q.Close())
		require.NoError(t, buf.Free())
		require.NoError(t, h1.Unpin())
		require.True(t, IsPinned(small[32:48]), "%v: the other pin keeps its lock", d)
		require.NoError(t, h2.Unpin())
		require.False(t, IsPinned(small), "%v", d)
		require.Zero(t, d.Registry().Stats().Entries)
	}

	h, err := Pin(xs, AllDevices)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3}, h.Devices())
	for dev := range 4 {
		d, _ := Get(dev)
		require.True(t, d.pinned(uintptr(unsafe.Pointer(&xs[0])), 1<<20), "device %d", dev)
	}
	require.NoError(t, h.Close())
	for dev := range 4 {
		d, _ := Get(dev)
		require.Zero(t, d.Registry().Stats().Entries, "device %d", dev)
	}

	// Locked behind ompalloc's back (hsa_amd_memory_lock for all agents):
	// no registry knows it, the driver does.
	ys := make([]byte, 1<<16)
	lock := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "hsa_amd_memory_lock")
	unlock := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "hsa_amd_memory_unlock")
	var agentPtr uintptr
	require.Zero(t, dlcall.Call(lock, uintptr(unsafe.Pointer(&ys[0])), uintptr(len(ys)), 0, 0, uintptr(unsafe.Pointer(&agentPtr))))
	require.True(t, IsPinned(ys), "the driver's pointer info says locked")
	require.Zero(t, dlcall.Call(unlock, uintptr(unsafe.Pointer(&ys[0]))))
	require.False(t, IsPinned(ys))

	// Registered behind ompalloc's back with cuMemHostRegister, in the
	// device's primary context made current on this thread, as a CUDA
	// library the program also uses would: the driver's pointer attributes
	// say pinned.
	zs := make([]byte, 1<<16)
	cudaLib := os.Getenv("OMPALLOC_CUDA_LIBRARY")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ctx uintptr
	require.Zero(t, dlcall.Call(hook(t, cudaLib, "cuDevicePrimaryCtxRetain"), uintptr(unsafe.Pointer(&ctx)), 0))
	defer func() { require.Zero(t, dlcall.Call(hook(t, cudaLib, "cuDevicePrimaryCtxRelease_v2"), 0)) }()
	setCurrent := hook(t, cudaLib, "cuCtxSetCurrent")
	require.Zero(t, dlcall.Call(setCurrent, ctx))
	defer dlcall.Call(setCurrent, 0)
	require.False(t, IsPinned(zs))
	require.Zero(t, dlcall.Call(hook(t, cudaLib, "cuMemHostRegister_v2"), uintptr(unsafe.Pointer(&zs[0])), uintptr(len(zs)), 0))
	require.True(t, IsPinned(zs), "the CUDA driver's pointer attributes say registered")
	require.True(t, IsPinned(zs[4096:8192]), "a part of the registered range")
	require.Zero(t, dlcall.Call(hook(t, cudaLib, "cuMemHostUnregister"), uintptr(unsafe.Pointer(&zs[0]))))
	require.False(t, IsPinned(zs))
	runtime.KeepAlive(zs)
}
