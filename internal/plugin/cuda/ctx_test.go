package cuda

import (
	"bytes"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A goroutine that locked its thread with another context current (for a
// cgo library, the runtime API) keeps it: every call of the plugin borrows
// the thread with cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2 instead of
// replacing the top of its context stack with cuCtxSetCurrent.
func TestCallerContextKept(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	require.NoError(t, d0.Open())
	require.NoError(t, d1.Open())
	setCurrent, getCurrent := rawSym(t, "cuCtxSetCurrent"), rawSym(t, "cuCtxGetCurrent")
	current := func() uintptr {
		var c uintptr
		require.Zero(t, call(getCurrent, uintptr(unsafe.Pointer(&c))))
		return c
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.Zero(t, call(setCurrent, d1.ctx), "the caller's own context: device 1's")
	defer call(setCurrent, 0)

	const n = 1 << 16
	buf, _ := hostBuf(t, n)
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"alloc and free", func() error {
			p, err := d0.Alloc(plugin.MemDevice, n)
			if err != nil {
				return err
			}
			return d0.Free(plugin.MemDevice, p)
		}},
		{"synchronous copy", func() error {
			p, err := d0.Alloc(plugin.MemDevice, n)
			if err != nil {
				return err
			}
			defer d0.Free(plugin.MemDevice, p)
			return d0.Copy(p, buf, n, plugin.HostToDevice, nil)
		}},
		{"queue", func() error {
			q, err := d0.NewQueue()
			if err != nil {
				return err
			}
			if _, err := q.Query(); err != nil {
				return err
			}
			return q.Destroy()
		}},
		{"lock and unlock", func() error {
			if _, err := d0.LockHost(buf, n); err != nil {
				return err
			}
			return d0.UnlockHost(buf)
		}},
		{"external lock query", func() error {
			_, _, err := d0.ExternalLock(buf, n)
			return err
		}},
		{"peer access", func() error {
			_, err := d0.PeerAccess(d1)
			return err
		}},
	} {
		// On this goroutine, not in a subtest: the thread is the point.
		require.NoError(t, tc.op(), tc.name)
		require.Equal(t, d1.ctx, current(), "%s: the thread's own context is current again", tc.name)
	}
}

// The fake promises no more than the driver's reference (see the quotes in
// fakecuda.c): pointer attributes need a current context, a copy over a
// registered and a pageable part (or over two registrations) is refused, a
// registration sharing a page with another is refused, an unreachable peer
// is CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, and cuStreamDestroy_v2 returns
// before the stream's work is done.
func TestFakeFollowsTheReference(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	require.NoError(t, d0.Open())
	require.NoError(t, d1.Open())
	sym := func(name string) func(args ...uintptr) int {
		fn := rawSym(t, name)
		return func(args ...uintptr) int { return int(call(fn, args...)) }
	}
	push, pop := sym("cuCtxPushCurrent_v2"), sym("cuCtxPopCurrent_v2")
	attr, register, unregister := sym("cuPointerGetAttribute"), sym("cuMemHostRegister_v2"), sym("cuMemHostUnregister")
	htod, htodAsync := sym("cuMemcpyHtoD_v2"), sym("cuMemcpyHtoDAsync_v2")
	streamCreate, streamDestroy, enablePeer := sym("cuStreamCreate"), sym("cuStreamDestroy_v2"), sym("cuCtxEnablePeerAccess")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var popped uintptr
	for pop(uintptr(unsafe.Pointer(&popped))) == 0 { // no context current on this thread
	}

	const n = 1 << 16
	buf, b := hostBuf(t, n)
	var mt uint32
	require.Equal(t, 201, attr(uintptr(unsafe.Pointer(&mt)), cuPointerAttributeMemoryType, buf), "no current context: CUDA_ERROR_INVALID_CONTEXT")

	require.Zero(t, push(d0.ctx))
	defer pop(uintptr(unsafe.Pointer(&popped)))
	mem, err := d0.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d0.Free(plugin.MemDevice, mem)) }()
	require.Zero(t, register(buf, 8192, cuMemHostRegisterPortable))
	require.Equal(t, 1, htod(mem, buf+4096, 8192), "registered and pageable: CUDA_ERROR_INVALID_VALUE")
	require.Zero(t, htod(mem, buf, 8192), "wholly registered")
	require.Zero(t, register(buf+8192, 8192, cuMemHostRegisterPortable))
	require.Equal(t, 1, htod(mem, buf+4096, 8192), "over two registrations")
	require.Zero(t, register(buf+16384, 100, cuMemHostRegisterPortable))
	require.Equal(t, 712, register(buf+16384+100, 100, cuMemHostRegisterPortable), "a page shared with another registration")
	for _, p := range []uintptr{buf, buf + 8192, buf + 16384} {
		require.Zero(t, unregister(p))
	}

	t.Setenv("FAKECUDA_PEER", "none")
	require.Equal(t, 217, enablePeer(d1.ctx, 0), "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED")

	t.Setenv("FAKECUDA_COPY_DELAY_US", "300000") // read by the stream's worker at creation
	var s uintptr
	require.Zero(t, streamCreate(uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking))
	pattern(b[:4096], 9)
	open := holdStreams(t) // the copy stays queued until open, however slow the host
	held := time.AfterFunc(10*time.Second, open)
	require.Zero(t, htodAsync(mem, buf, 4096, s))
	require.Zero(t, streamDestroy(s))
	require.True(t, held.Stop(), "cuStreamDestroy_v2 returns before the work is done (it returned only once the held work was let go)")
	open()
	back := make([]byte, 4096)
	require.Eventually(t, func() bool {
		require.NoError(t, d0.Copy(uintptr(unsafe.Pointer(&back[0])), mem, 4096, plugin.DeviceToHost, nil))
		return bytes.Equal(back, b[:4096])
	}, 10*time.Second, 10*time.Millisecond, "the destroyed stream's work still completes")
}
