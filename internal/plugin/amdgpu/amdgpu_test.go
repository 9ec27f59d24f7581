package amdgpu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/loader"
)

func TestEnumerate(t *testing.T) {
	p := fakePlugin(t)
	st := p.Status()
	require.NoError(t, st.Err)
	require.Equal(t, "amdgpu", st.Plugin)
	want, err := filepath.EvalSymlinks(fakePath)
	require.NoError(t, err)
	require.Equal(t, want, st.Library, "Status names the file mapped, resolved")
	require.Equal(t, "1.1", st.Version)
	require.Equal(t, "HSA_STATUS_SUCCESS", st.Init)

	devs := p.Devices()
	require.Len(t, devs, 2, "FAKEHSA_GPUS defaults to 2; the CPU agent is not a device")
	for _, d := range devs {
		info := d.Info()
		require.Equal(t, plugin.Info{
			Name: "Fake AMD Instinct MI210", Vendor: "amd", Driver: st.Library, Version: "1.1",
			Memory: 1 << 30, Capability: "gfx90a", NUMANode: -1,
		}, info)
		dd := d.(*device)
		require.NotNil(t, dd.pools.coarse, "coarse-grained VRAM pool")
		require.NotNil(t, dd.pools.fine, "fine-grained VRAM pool")
		require.NotNil(t, dd.host, "the CPU's fine-grained pool")
		require.NotEqual(t, dd.pools.coarse.handle, dd.pools.fine.handle)
		require.Equal(t, uint32(flagKernargInit|flagFineGrained), dd.host.flags,
			"the fake CPU has only the kernarg fine-grained pool, as ROCm 5.2's")
	}
	require.NotEqual(t, devs[0].(*device).agent, devs[1].(*device).agent)
}

// Every plugin of the process shares one purego callback, and an iteration
// leaves nothing behind in the key table.
func TestCallbackCreatedOnce(t *testing.T) {
	needFake(t)
	first, err := collector()
	require.NoError(t, err)
	for range 20 {
		p := New()
		require.NoError(t, p.Init())
		require.Len(t, p.Devices(), 2)
	}
	again, err := collector()
	require.NoError(t, err)
	require.Equal(t, first, again)
	listsMu.Lock()
	defer listsMu.Unlock()
	require.Empty(t, lists)
}

func TestAllocFree(t *testing.T) {
	d := fakeDevices(t)[0]
	for _, kind := range []plugin.MemKind{plugin.MemDevice, plugin.MemHost, plugin.MemShared} {
		t.Run(kind.String(), func(t *testing.T) {
			before := count(t, "allocs")
			p, err := d.Alloc(kind, 1000)
			require.NoError(t, err)
			require.NotZero(t, p)
			require.Equal(t, before+1, count(t, "allocs"))

			info, err := d.pointerInfo(p)
			require.NoError(t, err)
			require.Equal(t, uint32(pointerTypeHSA), info.Type)
			if kind == plugin.MemDevice {
				// As ROCr: a host address for VRAM too; the owner tells.
				require.Equal(t, p, info.HostBase, "ROCr reports hostBaseAddress == agentBaseAddress for VRAM")
				require.Equal(t, d.agent, info.AgentOwner)
			} else {
				// Host and shared memory is host memory the host can use.
				b := cmem.Bytes(p, 1000)
				b[0], b[999] = 1, 2
				require.Equal(t, p, info.HostBase)
			}

			require.ErrorIs(t, d.Free((kind+1)%3, p), ErrNotAllocated, "wrong kind")
			require.NoError(t, d.Free(kind, p))
			require.Equal(t, before, count(t, "allocs"))
			require.ErrorIs(t, d.Free(kind, p), ErrNotAllocated, "double free")
		})
	}
}

func TestAllocErrors(t *testing.T) {
	d := fakeDevices(t)[0]
	_, err := d.Alloc(plugin.MemDevice, 0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	_, err = d.Alloc(plugin.MemKind(7), 10)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)

	// More than the 1 GiB pool: the runtime refuses, by name.
	_, err = d.Alloc(plugin.MemDevice, 2<<30)
	var he *Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, "hsa_amd_memory_pool_allocate", he.Call)
	require.Equal(t, StatusErrorOutOfResources, he.Code)
	require.Equal(t, "HSA_STATUS_ERROR_OUT_OF_RESOURCES", he.Name)
	require.NotEmpty(t, he.Desc, "the runtime's description from hsa_status_string")
	require.ErrorIs(t, err, &Error{Code: StatusErrorOutOfResources})
	require.NotErrorIs(t, err, &Error{Code: StatusErrorOutOfResources, Call: "hsa_amd_memory_lock"})
}

func TestLockUnlock(t *testing.T) {
	d := fakeDevices(t)[0]
	const n = 1 << 16
	host := hostBuffer(t, n)
	before := count(t, "locks")

	dev, err := d.LockHost(host, n)
	require.NoError(t, err)
	require.NotZero(t, dev)
	require.NotEqual(t, host, dev, "the fake's agent pointer differs from the host pointer")
	require.Equal(t, before+1, count(t, "locks"))

	info, err := d.pointerInfo(host + 100)
	require.NoError(t, err)
	require.Equal(t, uint32(pointerTypeLocked), info.Type)
	require.Equal(t, pointerInfo{
		Size: uint32(unsafe.Sizeof(pointerInfo{})), Type: pointerTypeLocked,
		AgentBase: dev, HostBase: host, SizeInBytes: n, AgentOwner: d.cpu, GlobalFlags: flagFineGrained,
	}, info)

	_, ok, err := d.ExternalLock(host, n)
	require.NoError(t, err)
	require.False(t, ok, "a lock of this device is not external")

	require.NoError(t, d.UnlockHost(host))
	require.Equal(t, before, count(t, "locks"))
	require.ErrorIs(t, d.UnlockHost(host), ErrNotLocked)

	_, err = d.LockHost(0, n)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
	_, err = d.LockHost(host, 0)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
}

// Memory the user locked through the runtime directly is found with
// hsa_amd_pointer_info and reported with its agent pointer.
func TestExternalLock(t *testing.T) {
	d := fakeDevices(t)[0]
	const n = 1 << 16
	host := hostBuffer(t, n)

	_, ok, err := d.ExternalLock(host, n)
	require.NoError(t, err)
	require.False(t, ok, "pageable memory")

	dev, err := d.lockLocked(host, n) // as a user would, behind the device's back
	require.NoError(t, err)
	defer func() { require.NoError(t, d.fn.status("hsa_amd_memory_unlock", d.fn.memUnlock, host)) }()

	ext, ok, err := d.ExternalLock(host+4096, 100)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uintptr(n), ext.Size)
	require.Equal(t, host, ext.Host)
	require.Equal(t, dev, ext.Dev)

	_, ok, err = d.ExternalLock(host+n-10, 100)
	require.ErrorIs(t, err, ErrPartialExternalLock)
	require.False(t, ok)
}

// pattern fills n bytes at p with a pattern depending on seed.
func pattern(p, n uintptr, seed byte) []byte {
	b := cmem.Bytes(p, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return append([]byte(nil), b...)
}

// A round trip host → device → other device buffer → host, from each kind
// of host memory, synchronously and on a queue: the bytes arrive although
// the fake performs copies late on its worker thread.
func TestCopyRoundTrip(t *testing.T) {
	d := fakeDevices(t)[0]
	const n = 100_000
	sources := map[string]func(t *testing.T) uintptr{
		"pageable": func(t *testing.T) uintptr { return hostBuffer(t, n) },
		"locked": func(t *testing.T) uintptr {
			p := hostBuffer(t, n)
			_, err := d.LockHost(p, n)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.UnlockHost(p)) })
			return p
		},
		"host-alloc": func(t *testing.T) uintptr {
			p, err := d.Alloc(plugin.MemHost, n)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.Free(plugin.MemHost, p)) })
			return p
		},
	}
	for name, mk := range sources {
		for _, async := range []bool{false, true} {
			t.Run(name+"/async="+strconv.FormatBool(async), func(t *testing.T) {
				src, dst := mk(t), mk(t)
				want := pattern(src, n, 3)
				pattern(dst, n, 99)
				dev1, err := d.Alloc(plugin.MemDevice, n)
				require.NoError(t, err)
				defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev1)) }()
				dev2, err := d.Alloc(plugin.MemDevice, n)
				require.NoError(t, err)
				defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev2)) }()
				signals, locks := count(t, "signals"), count(t, "locks")

				var q plugin.QueueImpl
				if async {
					q, err = d.NewQueue()
					require.NoError(t, err)
				}
				require.NoError(t, d.Copy(dev1, src, n, plugin.HostToDevice, q))
				require.NoError(t, d.Copy(dev2, dev1, n, plugin.DeviceToDevice, q))
				require.NoError(t, d.Copy(dst, dev2, n, plugin.DeviceToHost, q))
				if async {
					require.NoError(t, q.Synchronize())
					done, err := q.Query()
					require.NoError(t, err)
					require.True(t, done)
					require.NoError(t, q.Destroy())
				}
				require.True(t, bytes.Equal(want, cmem.Bytes(dst, n)), "round trip changed the bytes")
				require.Equal(t, signals, count(t, "signals"), "every completion signal destroyed")
				require.Equal(t, locks, count(t, "locks"), "transfer locks of pageable memory released")
				require.Zero(t, count(t, "pending"))
			})
		}
	}
}

// Empty, nil, wrapping and host-to-host copies and queues of another
// device are the generic layer's (plugin.Impl.Copy's contract; target's
// TestCopyChecksAreGeneric); the plugin refuses what it cannot do itself.
func TestCopyErrors(t *testing.T) {
	ds := fakeDevices(t)
	d := ds[0]
	src, dst := hostBuffer(t, 4096), hostBuffer(t, 4096)
	require.ErrorIs(t, d.Copy(dst, src, 10, plugin.Direction(9), nil), sentinel.ErrInvalidArgument)
	require.ErrorIs(t, d.Copy(dst, src, 10, plugin.HostToHost, nil), sentinel.ErrInvalidArgument, "host to host is memmoved by the generic layer")
	require.ErrorIs(t, d.Copy(dst, src, 10, plugin.HostToDevice, foreignQueue{}), ErrForeignQueue, "a queue of another plugin")

	// A device address the runtime does not know: refused by name, no crash.
	err := d.Copy(dst, 1<<62|0x1000, 10, plugin.DeviceToHost, nil)
	require.ErrorIs(t, err, &Error{Call: "hsa_amd_memory_async_copy", Code: StatusErrorInvalidArgument})
}

// Many copies on one queue that is never synchronized in between: the queue
// releases completed signals as it goes, and every destination gets its data.
func TestQueueManyCopies(t *testing.T) {
	d := fakeDevices(t)[0]
	const each, copies = 512, 3 * reapAt
	src, dst := hostBuffer(t, each*copies), hostBuffer(t, each*copies)
	want := pattern(src, each*copies, 5)
	dev, err := d.Alloc(plugin.MemDevice, each*copies)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
	signals := count(t, "signals")

	q, err := d.NewQueue()
	require.NoError(t, err)
	for i := range uintptr(copies) {
		require.NoError(t, d.Copy(dev+i*each, src+i*each, each, plugin.HostToDevice, q))
		require.NoError(t, d.Copy(dst+i*each, dev+i*each, each, plugin.DeviceToHost, q))
	}
	// Once everything submitted completed, one more submission releases it:
	// the queue holds at most reapAt signals, not one per copy.
	drain(t)
	require.NoError(t, d.Copy(dst, dev, each, plugin.DeviceToHost, q))
	require.LessOrEqual(t, len(q.(*queue).pending), reapAt, "completed signals are reaped")
	require.NoError(t, q.Synchronize())
	require.Equal(t, want, cmem.Bytes(dst, each*copies))
	require.Equal(t, signals, count(t, "signals"))
	require.NoError(t, q.Destroy())
	require.ErrorIs(t, d.Copy(dst, dev, each, plugin.DeviceToHost, q), ErrClosed)
}

// The fake holds the copies (its "copy" gate) while the test looks,
// however slow the host: Query says false, the destination is untouched,
// then Synchronize brings the bytes and Query says true. The fake has one
// engine that performs held copies newest first unless a signal orders
// them, so the device-to-host copy reads what the host-to-device copy
// before it on the queue wrote only because the queue chains them (without
// the chain this test fails at the data check).
func TestQueryFalseThenTrue(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestQueryFalseThenTrue", "FAKEHSA_COPY_DELAY_US=0", "FAKEHSA_ENGINES=1") {
		return
	}
	d := fakeDevices(t)[0]
	const n = 4096
	src, dst := hostBuffer(t, n), hostBuffer(t, n)
	want := pattern(src, n, 7)
	old := pattern(dst, n, 8)
	dev, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)
	hsaGate(t, "copy", true)
	t.Cleanup(func() { hsaGate(t, "copy", false) })
	require.NoError(t, d.Copy(dev, src, n, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(dst, dev, n, plugin.DeviceToHost, q))
	done, err := q.Query()
	require.NoError(t, err)
	require.False(t, done, "copies run late")
	require.Equal(t, old, cmem.Bytes(dst, n), "nothing copied yet")
	holdUntilDue(t, 2)
	hsaGate(t, "copy", false)
	require.NoError(t, q.Synchronize())
	require.Equal(t, want, cmem.Bytes(dst, n))
	done, err = q.Query()
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, q.Destroy())
}

// Each injected runtime failure comes back as an *Error naming the call and
// the status, and leaves nothing behind; the next call succeeds.
func TestInjectedFailures(t *testing.T) {
	d := fakeDevices(t)[0]
	const n = 8192
	dev, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()

	cases := []struct {
		fail string
		call string
		code int
		op   func(host uintptr) error // host: fresh pageable memory
	}{
		{"hsa_amd_memory_pool_allocate:1", "hsa_amd_memory_pool_allocate", StatusErrorOutOfResources,
			func(uintptr) error { return allocFree(d, plugin.MemDevice, n) }},
		{"hsa_amd_agents_allow_access:1:0x1004", "hsa_amd_agents_allow_access", StatusErrorInvalidAgent,
			func(uintptr) error { return allocFree(d, plugin.MemHost, n) }},
		{"hsa_amd_memory_lock:1", "hsa_amd_memory_lock", StatusErrorOutOfResources,
			func(host uintptr) error {
				if _, err := d.LockHost(host, n); err != nil {
					return err
				}
				return d.UnlockHost(host)
			}},
		{"hsa_amd_pointer_info:1:0x1000", "hsa_amd_pointer_info", StatusError,
			func(host uintptr) error { _, _, err := d.ExternalLock(host, n); return err }},
		{"hsa_signal_create:1", "hsa_signal_create", StatusErrorOutOfResources,
			func(host uintptr) error { return d.Copy(dev, host, n, plugin.HostToDevice, nil) }},
		{"hsa_amd_memory_async_copy:1:0x1000", "hsa_amd_memory_async_copy", StatusError,
			func(host uintptr) error { return d.Copy(dev, host, n, plugin.HostToDevice, nil) }},
		// A new value of FAKEHSA_FAIL restarts the fake's count.
		{"hsa_amd_memory_lock:1:0x1008", "hsa_amd_memory_lock", StatusErrorOutOfResources,
			func(host uintptr) error { return d.Copy(dev, host, n, plugin.HostToDevice, nil) }},
		{"hsa_amd_memory_async_copy:1", "hsa_amd_memory_async_copy", StatusErrorOutOfResources,
			func(host uintptr) error {
				q, err := d.NewQueue()
				require.NoError(t, err)
				defer func() { require.NoError(t, q.Destroy()) }()
				return d.Copy(host, dev, n, plugin.DeviceToHost, q)
			}},
	}
	for _, c := range cases {
		t.Run(c.fail, func(t *testing.T) {
			host := hostBuffer(t, n)
			allocs, locks, signals := count(t, "allocs"), count(t, "locks"), count(t, "signals")
			t.Setenv("FAKEHSA_FAIL", c.fail)
			err := c.op(host)
			var he *Error
			require.ErrorAs(t, err, &he)
			require.Equal(t, c.call, he.Call)
			require.Equal(t, c.code, he.Code)
			require.Equal(t, statusNames[c.code], he.Name)
			require.ErrorContains(t, err, c.call)
			require.ErrorContains(t, err, statusNames[c.code])
			require.Equal(t, allocs, count(t, "allocs"), "allocation undone")
			require.Equal(t, locks, count(t, "locks"), "lock undone")
			require.Equal(t, signals, count(t, "signals"), "signal destroyed")
			require.NoError(t, c.op(host), "only the first call fails")
		})
	}
}

func allocFree(d *device, kind plugin.MemKind, n uintptr) error {
	p, err := d.Alloc(kind, n)
	if err != nil {
		return err
	}
	return d.Free(kind, p)
}

// A failed unlock keeps the lock tracked, so that it can be retried.
func TestUnlockFailureKeepsLock(t *testing.T) {
	d := fakeDevices(t)[0]
	host := hostBuffer(t, 4096)
	_, err := d.LockHost(host, 4096)
	require.NoError(t, err)
	t.Setenv("FAKEHSA_FAIL", "hsa_amd_memory_unlock:1")
	require.ErrorIs(t, d.UnlockHost(host), &Error{Call: "hsa_amd_memory_unlock", Code: StatusErrorOutOfResources})
	require.NoError(t, d.UnlockHost(host))
}

func TestCloseReleasesEverything(t *testing.T) {
	needFake(t)
	p := fakePlugin(t)
	d := p.Devices()[1].(*device)
	allocs, locks, signals := count(t, "allocs"), count(t, "locks"), count(t, "signals")
	host := hostBuffer(t, 1<<20)
	dev, err := d.Alloc(plugin.MemDevice, 1<<20)
	require.NoError(t, err)
	_, err = d.Alloc(plugin.MemShared, 100)
	require.NoError(t, err)
	_, err = d.LockHost(host, 4096)
	require.NoError(t, err)
	q, err := d.NewQueue()
	require.NoError(t, err)
	require.NoError(t, d.Copy(dev, host+8192, 1000, plugin.HostToDevice, q), "in flight at Close")

	require.NoError(t, d.Close())
	require.Equal(t, allocs, count(t, "allocs"))
	require.Equal(t, locks, count(t, "locks"))
	require.Equal(t, signals, count(t, "signals"))
	require.Zero(t, count(t, "pending"))

	_, err = d.Alloc(plugin.MemDevice, 10)
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.LockHost(host, 10)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, d.Copy(dev, host, 10, plugin.HostToDevice, nil), ErrClosed)
	_, err = d.NewQueue()
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, d.Close(), "twice is fine")
}

func TestGPUCount(t *testing.T) {
	needFake(t)
	for _, n := range []int{0, 3} {
		name := "TestGPUCount" + strconv.Itoa(n)
		t.Run(name, func(t *testing.T) {
			inChild(t, name, "FAKEHSA_GPUS="+strconv.Itoa(n))
		})
	}
}

func TestGPUCount0(t *testing.T) { gpuCountChild(t, "TestGPUCount0", 0) }
func TestGPUCount3(t *testing.T) { gpuCountChild(t, "TestGPUCount3", 3) }

func gpuCountChild(t *testing.T, name string, n int) {
	if os.Getenv(childEnv) != name {
		t.Skip("run by TestGPUCount in a child process")
	}
	p := fakePlugin(t)
	require.Len(t, p.Devices(), n)
	require.NoError(t, p.Status().Err)
}

// Without /dev/kfd the real runtime's hsa_init fails with
// HSA_STATUS_ERROR_OUT_OF_RESOURCES; the plugin reports it by name and has
// no devices.
func TestNoKFD(t *testing.T) {
	needFake(t)
	if !inChild(t, "TestNoKFD", "FAKEHSA_NO_KFD=1") {
		return
	}
	p := New()
	err := p.Init()
	require.ErrorIs(t, err, loader.ErrInitFailed)
	require.ErrorIs(t, err, &Error{Call: "hsa_init", Code: StatusErrorOutOfResources})
	require.ErrorContains(t, err, "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
	require.Empty(t, p.Devices())
	st := p.Status()
	require.Equal(t, "HSA_STATUS_ERROR_OUT_OF_RESOURCES", st.Init)
	require.NotEmpty(t, st.Library)
	require.Empty(t, st.Version)
	require.ErrorIs(t, st.Err, loader.ErrInitFailed)
}

func TestLibraryAbsentDisabledOrWrong(t *testing.T) {
	cases := []struct {
		name, env, val string
		want           error
		init           string
	}{
		{"absent", "OMPALLOC_HSA_LIBRARY", "/nonexistent/libhsa-runtime64.so.1", loader.ErrNotFound, "not found"},
		{"disabled", "OMPALLOC_DISABLE_HSA", "1", loader.ErrDisabled, "disabled"},
		{"not HSA", "OMPALLOC_HSA_LIBRARY", "libc.so.6", loader.ErrSymbolMissing, "hsa_init"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.env, c.val)
			p := New()
			require.ErrorIs(t, p.Init(), c.want)
			require.Empty(t, p.Devices())
			st := p.Status()
			require.ErrorIs(t, st.Err, c.want)
			require.Contains(t, st.Init, c.init)
			if !errors.Is(c.want, loader.ErrSymbolMissing) {
				require.Empty(t, st.Library)
			}
		})
	}
}

// Every symbol bound is exported by the real ROCm runtime (Debian's
// libhsa-runtime64-1, whose nm -D output is kept in testdata).
func TestSymbolsInRealLibrary(t *testing.T) {
	raw, err := os.ReadFile("testdata/libhsa-runtime64.symbols")
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, l := range bytes.Split(raw, []byte("\n")) {
		if len(l) > 0 && l[0] != '#' {
			exported[string(l)] = true
		}
	}
	require.Greater(t, len(exported), 200)
	var s syms
	for _, sym := range s.table() {
		require.True(t, exported[sym.Name], "%s is not exported by libhsa-runtime64.so.1", sym.Name)
		for _, v := range sym.Versions {
			require.True(t, exported[sym.Name+v], "%s%s", sym.Name, v)
		}
	}
}

// Host memory one device allocated is reachable by the others, as in LLVM.
func TestHostMemoryReachableByEveryGPU(t *testing.T) {
	ds := fakeDevices(t)
	const n = 4096
	h, err := ds[0].Alloc(plugin.MemHost, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[0].Free(plugin.MemHost, h)) }()
	want := pattern(h, n, 11)
	dev, err := ds[1].Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, ds[1].Free(plugin.MemDevice, dev)) }()
	back := hostBuffer(t, n)
	require.NoError(t, ds[1].Copy(dev, h, n, plugin.HostToDevice, nil))
	require.NoError(t, ds[1].Copy(back, dev, n, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, n))
}

// Several goroutines share one queue: each submits its own round trips and
// synchronizes or queries at will; in-order execution keeps each round trip
// right, and nothing is left behind.
func TestSharedQueueConcurrent(t *testing.T) {
	d := fakeDevices(t)[0]
	const workers, rounds, each = 4, 25, 1024
	src, dst := hostBuffer(t, workers*rounds*each), hostBuffer(t, workers*rounds*each)
	want := pattern(src, workers*rounds*each, 13)
	dev, err := d.Alloc(plugin.MemDevice, workers*rounds*each)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
	signals, locks := count(t, "signals"), count(t, "locks")
	q, err := d.NewQueue()
	require.NoError(t, err)

	errs := make(chan error, workers)
	for w := range uintptr(workers) {
		go func() {
			var err error
			for r := uintptr(0); r < rounds && err == nil; r++ {
				off := (w*rounds + r) * each
				err = errors.Join(
					d.Copy(dev+off, src+off, each, plugin.HostToDevice, q),
					d.Copy(dst+off, dev+off, each, plugin.DeviceToHost, q))
				switch r % 3 {
				case 0:
					err = errors.Join(err, q.Synchronize())
				case 1:
					_, qerr := q.Query()
					err = errors.Join(err, qerr)
				}
			}
			errs <- err
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	require.NoError(t, q.Synchronize())
	require.Equal(t, want, cmem.Bytes(dst, workers*rounds*each))
	require.NoError(t, q.Destroy())
	require.Equal(t, signals, count(t, "signals"))
	require.Equal(t, locks, count(t, "locks"), "transfer locks of pageable memory released")
}

// Two copies in flight from the same pageable buffer share the lock taken
// for the first; it is released only after both completed.
func TestTransferLockShared(t *testing.T) {
	d := fakeDevices(t)[0]
	const n = 8192
	src := hostBuffer(t, n)
	want := pattern(src, n, 17)
	dev, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, dev)) }()
	locks := count(t, "locks")
	q, err := d.NewQueue()
	require.NoError(t, err)
	require.NoError(t, d.Copy(dev, src, n, plugin.HostToDevice, q))
	require.NoError(t, d.Copy(dev+100, src+100, 1000, plugin.HostToDevice, q), "inside the first copy's lock")
	require.Equal(t, map[uintptr]int{src: 2}, d.tab.Snapshot(), "one transfer lock, two references")
	require.Equal(t, locks+1, count(t, "locks"))
	require.NoError(t, q.Synchronize())
	require.Empty(t, d.tab.Snapshot())
	require.Equal(t, locks, count(t, "locks"))
	back := hostBuffer(t, n)
	require.NoError(t, d.Copy(back, dev, n, plugin.DeviceToHost, nil))
	require.Equal(t, want, cmem.Bytes(back, n))
	require.NoError(t, q.Destroy())
}

// HSA_STATUS_ERROR_OUT_OF_RESOURCES from hsa_amd_memory_pool_allocate is
// the vendor-neutral plugin.ErrOutOfMemory; from other calls it is not.
func TestPoolAllocateOutOfResourcesIsOutOfMemory(t *testing.T) {
	require.ErrorIs(t, &Error{Call: "hsa_amd_memory_pool_allocate", Code: StatusErrorOutOfResources}, plugin.ErrOutOfMemory)
	require.NotErrorIs(t, &Error{Call: "hsa_init", Code: StatusErrorOutOfResources}, plugin.ErrOutOfMemory)
}

// foreignQueue is a queue of another plugin.
type foreignQueue struct{}

func (foreignQueue) Synchronize() error   { return nil }
func (foreignQueue) Query() (bool, error) { return true, nil }
func (foreignQueue) Destroy() error       { return nil }
