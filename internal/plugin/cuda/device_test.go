package cuda

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

func TestAllocFree(t *testing.T) {
	d := dev(t, 1)
	base := [3]int{live(t, liveDevice), live(t, liveHostAlloc), live(t, liveManaged)}
	for _, tc := range []struct {
		kind     plugin.MemKind
		liveKind int
		hostUse  bool // the host may read and write it
	}{
		{plugin.MemDevice, liveDevice, false},
		{plugin.MemHost, liveHostAlloc, true},
		{plugin.MemShared, liveManaged, true},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			before := live(t, tc.liveKind)
			p, err := d.Alloc(tc.kind, 1<<16)
			require.NoError(t, err)
			require.NotZero(t, p)
			require.Equal(t, before+1, live(t, tc.liveKind))
			if tc.hostUse {
				b := cmem.Bytes(p, 1<<16)
				pattern(b, 3)
				require.Equal(t, byte(100*7%256)^3, b[100])
			} else {
				require.NotZero(t, p>>48, "the fake's device addresses are not host addresses")
			}
			other := plugin.MemHost
			if tc.kind == plugin.MemHost {
				other = plugin.MemDevice
			}
			require.ErrorIs(t, d.Free(other, p), ErrNotAllocated, "free with another kind")
			require.NoError(t, d.Free(tc.kind, p))
			require.Equal(t, before, live(t, tc.liveKind))
			require.ErrorIs(t, d.Free(tc.kind, p), ErrNotAllocated, "double free")
		})
	}
	_, err := d.Alloc(plugin.MemDevice, 0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	_, err = d.Alloc(plugin.MemKind(9), 10)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	require.Equal(t, base, [3]int{live(t, liveDevice), live(t, liveHostAlloc), live(t, liveManaged)})
}

func TestAllocOutOfDeviceMemory(t *testing.T) {
	d := dev(t, 0)
	_, err := d.Alloc(plugin.MemDevice, 17<<30) // the fake's devices have 16 GiB
	requireCode(t, err, "cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY")
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.Contains(t, err.Error(), "CUDA device 0")
}

// Synchronous copies in every direction move the real bytes.
func TestCopySyncRoundTrip(t *testing.T) {
	d := dev(t, 0)
	const n = 3<<20 + 17
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	pattern(sb, 0x5a)
	a, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	b, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, b)

	require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, nil))
	require.NoError(t, d.Copy(b, a, n, plugin.DeviceToDevice, nil))
	require.NoError(t, d.Copy(dst, b, n, plugin.DeviceToHost, nil))
	require.True(t, bytes.Equal(sb, db), "device round trip changed the bytes")

	// Empty, nil and host-to-host copies are the generic layer's
	// (plugin.Impl.Copy's contract; target's TestCopyChecksAreGeneric).

	// A host address is not a device address: the driver refuses it.
	err = d.Copy(src, dst, 16, plugin.HostToDevice, nil)
	requireCode(t, err, "cuMemcpyHtoDAsync", 1, "CUDA_ERROR_INVALID_VALUE")
	// Past the end of an allocation.
	err = d.Copy(a+n-8, src, 16, plugin.HostToDevice, nil)
	require.ErrorIs(t, err, ErrInvalidValue)
	require.ErrorIs(t, d.Copy(a, src, 16, plugin.Direction(42), nil), sentinel.ErrInvalidArgument)
	require.ErrorIs(t, d.Copy(a, src, 16, plugin.HostToHost, nil), sentinel.ErrInvalidArgument, "host to host is memmoved by the generic layer")
}

// holdStreams keeps the fake's streams busy (fakecuda's gate "stream"): no
// queued copy or event runs until the returned open, also run at cleanup.
// Work then stays pending however slow the host is, as on a device busy
// with other work: the driver promises the order, not when it completes.
func holdStreams(t *testing.T) (open func()) {
	needFake(t)
	gate(t, "stream", true)
	var once sync.Once
	open = func() { once.Do(func() { gate(t, "stream", false) }) }
	t.Cleanup(open)
	return open
}

// Async copies run late (the fake's worker waits before each): the host
// side must not be read before the queue is synchronized.
func TestCopyAsyncRoundTripLate(t *testing.T) {
	t.Setenv("FAKECUDA_COPY_DELAY_US", "30000") // read by the stream's worker at creation
	d := dev(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()

	const n = 1 << 20
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	pattern(sb, 0x11)
	a, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	b, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, b)

	open := holdStreams(t)
	require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(b, a, n, plugin.DeviceToDevice, q))
	require.NoError(t, d.Copy(dst, b, n, plugin.DeviceToHost, q))
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done, "three copies held in the fake cannot be done yet")
	require.NotEqual(t, sb[:64], db[:64], "the destination was written before the copies ran")
	open()
	require.NoError(t, q.Synchronize())
	done, err = q.Query()
	require.NoError(t, err)
	require.True(t, done)
	require.True(t, bytes.Equal(sb, db), "async round trip changed the bytes")
}

// The late worker reads the source when it runs, so reusing a host buffer
// before the queue completes shows: this is what staging must avoid.
func TestAsyncCopyReadsSourceLate(t *testing.T) {
	t.Setenv("FAKECUDA_COPY_DELAY_US", "20000")
	d := dev(t, 1)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer q.Destroy()
	src, sb := hostBuf(t, 4096)
	dst, db := hostBuf(t, 4096)
	a, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)

	pattern(sb, 1)
	open := holdStreams(t)
	require.NoError(t, d.Copy(a, src, 4096, plugin.HostToDevice, q))
	pattern(sb, 2) // reused too early
	open()
	require.NoError(t, q.Synchronize())
	require.NoError(t, d.Copy(dst, a, 4096, plugin.DeviceToHost, nil))
	want := make([]byte, 4096)
	pattern(want, 2)
	require.Equal(t, want, db)
}

func TestQueueQueryAndEvents(t *testing.T) {
	t.Setenv("FAKECUDA_COPY_DELAY_US", "50000")
	d := dev(t, 0)
	qi, err := d.NewQueue()
	require.NoError(t, err)
	q := qi.(*Queue)
	done, err := q.Query()
	require.NoError(t, err)
	require.True(t, done, "an empty queue is done")

	src, _ := hostBuf(t, 4096)
	a, err := d.Alloc(plugin.MemDevice, 4096)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	open := holdStreams(t)
	require.NoError(t, d.Copy(a, src, 4096, plugin.HostToDevice, q))
	ev, err := q.Record()
	require.NoError(t, err)
	edone, err := ev.Query()
	require.NoError(t, err)
	require.False(t, edone, "the event follows a copy held in the fake")
	open()
	require.NoError(t, ev.Synchronize())
	edone, err = ev.Query()
	require.NoError(t, err)
	require.True(t, edone)
	done, err = q.Query()
	require.NoError(t, err)
	require.True(t, done, "the queue has nothing after the event")
	require.NoError(t, ev.Destroy())

	// Polling alone completes the work.
	require.NoError(t, d.Copy(a, src, 4096, plugin.HostToDevice, q))
	deadline := time.Now().Add(10 * time.Second)
	for done = false; !done && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		done, err = q.Query()
		require.NoError(t, err)
	}
	require.True(t, done)

	streams := live(t, liveStreams)
	require.NoError(t, q.Destroy())
	require.Equal(t, streams-1, live(t, liveStreams))
	require.NoError(t, q.Destroy(), "a second Destroy does nothing")
	_, err = q.Query()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, d.Copy(a, src, 16, plugin.HostToDevice, q), ErrClosed)
}

// A queue of another device is the generic layer's to refuse (plugin.Impl.Copy's
// contract; target's TestCopyChecksAreGeneric); a queue of another plugin
// the plugin refuses itself, as it must reach its own stream.
func TestCopyOnQueueOfAnotherPlugin(t *testing.T) {
	d := dev(t, 0)
	a, err := d.Alloc(plugin.MemDevice, 64)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	src, _ := hostBuf(t, 64)
	require.ErrorIs(t, d.Copy(a, src, 64, plugin.HostToDevice, foreignQueue{}), sentinel.ErrInvalidArgument)
}

// foreignQueue is a queue of another plugin.
type foreignQueue struct{}

func (foreignQueue) Synchronize() error   { return nil }
func (foreignQueue) Query() (bool, error) { return true, nil }
func (foreignQueue) Destroy() error       { return nil }

// Driver calls from many goroutines: each call makes its context current on
// its own OS thread, whichever thread the goroutine runs on.
func TestConcurrentUse(t *testing.T) {
	p := fake(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			d := p.devices[g%2]
			if err := roundTrip(d, 4096+g, byte(g)); err != nil {
				errs <- fmt.Errorf("goroutine %d: %w", g, err)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func roundTrip(d *device, n int, seed byte) error {
	q, err := d.NewQueue()
	if err != nil {
		return err
	}
	defer q.Destroy()
	h, err := d.Alloc(plugin.MemHost, uintptr(2*n))
	if err != nil {
		return err
	}
	defer d.Free(plugin.MemHost, h)
	a, err := d.Alloc(plugin.MemDevice, uintptr(n))
	if err != nil {
		return err
	}
	defer d.Free(plugin.MemDevice, a)
	for i := 0; i < 20; i++ {
		in, out := cmem.Bytes(h, uintptr(n)), cmem.Bytes(h+uintptr(n), uintptr(n))
		pattern(in, seed+byte(i))
		if err := d.Copy(a, h, uintptr(n), plugin.HostToDevice, q); err != nil {
			return err
		}
		if err := d.Copy(h+uintptr(n), a, uintptr(n), plugin.DeviceToHost, q); err != nil {
			return err
		}
		if err := q.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(in, out) {
			return fmt.Errorf("round %d: bytes differ", i)
		}
	}
	return nil
}

// Close releases the device's allocations, locks and context.
func TestCloseReleasesEverything(t *testing.T) {
	needFake(t)
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	d := p.devices[0]
	base := [4]int{live(t, liveDevice), live(t, liveHostAlloc), live(t, liveManaged), live(t, liveRegistered)}
	for _, k := range []plugin.MemKind{plugin.MemDevice, plugin.MemHost, plugin.MemShared} {
		_, err := d.Alloc(k, 8192)
		require.NoError(t, err)
	}
	buf, _ := hostBuf(t, 1<<16)
	_, err := d.LockHost(buf, 1<<16)
	require.NoError(t, err)
	_, err = d.LockHost(buf, 4096)
	require.NoError(t, err)
	require.Equal(t, base[3]+1, live(t, liveRegistered))

	releases := calls(t, "cuDevicePrimaryCtxRelease")
	require.NoError(t, d.Close())
	require.Equal(t, base, [4]int{live(t, liveDevice), live(t, liveHostAlloc), live(t, liveManaged), live(t, liveRegistered)})
	require.Equal(t, releases+2, calls(t, "cuDevicePrimaryCtxRelease"), "the device's reference and its registration's")
	require.NoError(t, d.Close(), "a second Close does nothing")
	_, err = d.Alloc(plugin.MemDevice, 10)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, p.devices[1].Close())
}

// rawSym is a driver entry point the plugin does not bind (any more).
func rawSym(t *testing.T, name string) uintptr {
	t.Helper()
	lib, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{fakeLib}})
	require.NoError(t, err)
	fn, err := lib.Sym(name)
	require.NoError(t, err)
	return fn
}

// The fake follows the driver's "API synchronization behavior": a
// synchronous cuMemcpyDtoD_v2 and a synchronous cuMemcpyHtoD_v2 from pageable
// memory return before the bytes land, a non-blocking stream does not wait
// for them, and a synchronous cuMemcpyDtoH_v2 (on the legacy stream, after
// them) sees them.
func TestFakeLegacyStreamSemantics(t *testing.T) {
	// Long enough that no stall of a loaded machine lets the legacy stream
	// finish first; it costs nothing, as waiting for the stream hurries it.
	t.Setenv("FAKECUDA_LEGACY_DELAY_US", "5000000")
	d := dev(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	const n = 64 << 10
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	a, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	b, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, b)
	pattern(sb, 0x31)
	require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, nil))

	for _, tc := range []struct {
		name string
		sync func() result
	}{
		{"cuMemcpyDtoD_v2", func() result { return call(rawSym(t, "cuMemcpyDtoD_v2"), b, a, n) }},
		{"cuMemcpyHtoD_v2", func() result { return call(rawSym(t, "cuMemcpyHtoD_v2"), b, src, n) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(db)
			require.NoError(t, d.Copy(b, dst, n, plugin.HostToDevice, nil)) // zeroes, complete
			require.NoError(t, d.withCtx(tc.name, tc.sync))
			require.NoError(t, d.Copy(dst, b, n, plugin.DeviceToHost, q))
			require.NoError(t, q.Synchronize())
			require.NotEqual(t, sb, db, "a non-blocking stream waited for the legacy stream")
			require.NoError(t, d.withCtx("cuMemcpyDtoH_v2", func() result { return call(rawSym(t, "cuMemcpyDtoH_v2"), dst, b, n) }))
			require.Equal(t, sb, db, "the legacy stream is in order")
		})
	}
}

// A copy without a queue is complete on return: the next copy on a queue
// (a non-blocking stream) reads what it wrote. Fails with the driver's
// "synchronous" cuMemcpyDtoD_v2 / cuMemcpyHtoD_v2 from pageable memory.
func TestSyncCopyCompleteForQueues(t *testing.T) {
	t.Setenv("FAKECUDA_LEGACY_DELAY_US", "50000")
	d := dev(t, 1)
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()
	const n = 2 << 20
	src, sb := hostBuf(t, n)
	dst, db := hostBuf(t, n)
	a, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer d.Free(plugin.MemDevice, a)
	for i, dir := range []plugin.Direction{plugin.HostToDevice, plugin.DeviceToDevice} {
		t.Run(dir.String(), func(t *testing.T) {
			b, err := d.Alloc(plugin.MemDevice, n)
			require.NoError(t, err)
			defer d.Free(plugin.MemDevice, b)
			pattern(sb, byte(0x40+i))
			if dir == plugin.HostToDevice {
				require.NoError(t, d.Copy(b, src, n, dir, nil)) // pageable source
			} else {
				require.NoError(t, d.Copy(a, src, n, plugin.HostToDevice, q))
				require.NoError(t, q.Synchronize())
				require.NoError(t, d.Copy(b, a, n, dir, nil))
			}
			clear(db)
			require.NoError(t, d.Copy(dst, b, n, plugin.DeviceToHost, q))
			require.NoError(t, q.Synchronize())
			require.True(t, bytes.Equal(sb, db), "the queue read the destination before the %s copy landed", dir)
		})
	}
}

// A synchronous copy racing Close ends before Close destroys the streams
// and releases the context: its stream is not put back (leaked) afterwards,
// and a copy after Close fails with ErrClosed.
func TestSyncCopyRacingClose(t *testing.T) {
	needFake(t)
	t.Setenv("FAKECUDA_COPY_DELAY_US", "200000") // read by a stream's worker at creation
	const n = 1 << 16
	mem, err := dev(t, 0).Alloc(plugin.MemDevice, n) // the shared device's: Close below does not free it
	require.NoError(t, err)
	defer func() { require.NoError(t, dev(t, 0).Free(plugin.MemDevice, mem)) }()
	src, _ := hostBuf(t, n)
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	d := p.devices[0]
	defer func() { require.NoError(t, p.devices[1].Close()) }()
	require.NoError(t, d.Open())
	streams := live(t, liveStreams)
	copies := calls(t, "cuMemcpyHtoDAsync")
	done := make(chan error, 1)
	go func() { done <- d.Copy(mem, src, n, plugin.HostToDevice, nil) }()
	deadline := time.Now().Add(10 * time.Second)
	for calls(t, "cuMemcpyHtoDAsync") == copies && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, streams+1, live(t, liveStreams), "the copy runs on a stream of its own")
	require.NoError(t, d.Close(), "while the copy is in flight")
	require.NoError(t, <-done)
	require.Equal(t, streams, live(t, liveStreams), "no stream left behind by the copy that raced Close")
	require.ErrorIs(t, d.Copy(mem, src, n, plugin.HostToDevice, nil), ErrClosed)
}
