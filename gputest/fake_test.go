package gputest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/target"
)

// inChild runs test name of this binary in a child process with env and
// returns its output; the child must pass.
func inChild(t *testing.T, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

func TestDevicesAreTheFakes(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	ds := fake.Devices()
	require.Len(t, ds, 3)
	require.Equal(t, "cuda", ds[0].Plugin())
	require.Equal(t, "cuda", ds[1].Plugin())
	require.Equal(t, "amdgpu", ds[2].Plugin())
	require.Equal(t, 3, target.NumDevices(), "no real GPU joins the fakes")
	require.Contains(t, ds[0].Info().Name, "Fake CUDA Device 0")
	require.Equal(t, uint64(16384)<<20, ds[0].Info().Memory)
}

// Another configuration in the same process is refused, saying why.
func TestOneConfigurationPerProcess(t *testing.T) {
	_, err := Start(CUDA(1))
	require.ErrorIs(t, err, ErrTooLate)
	require.ErrorContains(t, err, "set up with CUDA(2) HSA(1), this asks for CUDA(1)")
	f, err := Start(HSA(1), CUDA(2))
	require.NoError(t, err, "the same configuration, options in another order")
	require.Len(t, f.Devices(), 3)
	_, err = Start(CUDA(-1))
	require.ErrorContains(t, err, "CUDA(-1)")
	_, err = Start(Memory(1000))
	require.ErrorContains(t, err, "whole MiB")
}

// Data goes to each fake device and back; the counters follow the
// allocation and its free, per device.
func TestRoundTripAndCounts(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	for i, d := range fake.Devices() {
		t.Run(d.String(), func(t *testing.T) {
			before := fake.Counts()
			src := []float32{1, 2, 3, 4, 5}
			arr, err := target.AllocArray[float32](d, target.MemDevice, 1<<18)
			require.NoError(t, err)
			during := fake.Counts()
			require.Equal(t, before.DeviceAllocs+1, during.DeviceAllocs)
			require.GreaterOrEqual(t, during.DeviceBytes[i], before.DeviceBytes[i]+1<<20)
			for j := range during.DeviceBytes {
				if j != i {
					require.Equal(t, before.DeviceBytes[j], during.DeviceBytes[j], "device %d untouched", j)
				}
			}
			part, err := arr.Slice(0, len(src))
			require.NoError(t, err)
			require.NoError(t, target.CopyToDevice(part, src, nil))
			got := make([]float32, len(src))
			require.NoError(t, target.CopyFromDevice(got, part, nil))
			require.Equal(t, src, got)
			require.NoError(t, arr.Free())
			require.Equal(t, before.DeviceAllocs, fake.Counts().DeviceAllocs)
			require.Equal(t, before.DeviceBytes[i], fake.Counts().DeviceBytes[i])
		})
	}
}

// Fail makes the driver's nth call fail with the driver's error, and
// stops at the end of the test.
func TestFail(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	ds := fake.Devices()
	t.Run("cuda", func(t *testing.T) {
		fake.Fail(t, "cuMemAlloc_v2", 2)
		a, err := target.AllocArray[byte](ds[0], target.MemDevice, 4096)
		require.NoError(t, err, "the first call passes")
		_, err = target.AllocArray[byte](ds[0], target.MemDevice, 4096)
		require.ErrorContains(t, err, "CUDA_ERROR_UNKNOWN")
		require.NoError(t, a.Free())
	})
	t.Run("hsa", func(t *testing.T) {
		fake.Fail(t, "hsa_amd_memory_pool_allocate", 0)
		_, err := target.AllocArray[byte](ds[2], target.MemDevice, 4096)
		require.ErrorContains(t, err, "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
	})
	require.Empty(t, os.Getenv("FAKECUDA_FAIL"), "undone at the subtest's end")
	require.Empty(t, os.Getenv("FAKEHSA_FAIL"))
	for _, d := range []*target.Device{ds[0], ds[2]} {
		a, err := target.AllocArray[byte](d, target.MemDevice, 4096)
		require.NoError(t, err, "%v works again", d)
		require.NoError(t, a.Free())
	}
	rec := &recorder{}
	fake.failT(rec, "nvmlInit")
	require.Contains(t, rec.msg, "name a CUDA driver function")
}

// failT calls Fail with a testing.TB that records instead of failing.
func (f *Fake) failT(r *recorder, call string) {
	defer func() { _ = recover() }()
	f.Fail(r, call, 1)
}

// Hold keeps queued work pending (no sleep decides it) until released.
func TestHold(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	for _, d := range []*target.Device{fake.Devices()[0], fake.Devices()[2]} {
		t.Run(d.String(), func(t *testing.T) {
			q, err := d.NewQueue()
			require.NoError(t, err)
			defer func() { require.NoError(t, q.Close()) }()
			arr, err := target.AllocArray[byte](d, target.MemDevice, 1<<16)
			require.NoError(t, err)
			defer func() { require.NoError(t, arr.Free()) }()
			src := make([]byte, 1<<16)
			release := fake.Hold(t)
			require.NoError(t, target.CopyToDevice(arr, src, q))
			done, err := q.Query()
			require.NoError(t, err)
			require.False(t, done, "held work is pending")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, q.Synchronize(ctx), context.DeadlineExceeded)
			release()
			require.NoError(t, q.Synchronize(context.Background()))
			release() // a second call does nothing
		})
	}
}

// A test that leaves device memory allocated fails at its end, naming the
// leak; AllowLeaks turns that off.
func TestLeakCheck(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	d := fake.Devices()[0]
	leak, err := target.AllocArray[byte](d, target.MemDevice, 1<<20)
	require.NoError(t, err)
	rec := &recorder{}
	fake.check(rec, false)
	require.Contains(t, rec.msg, "1 device allocation(s) made during the test are still live")
	rec = &recorder{}
	fake.check(rec, true)
	require.Empty(t, rec.msg)
	require.NoError(t, leak.Free())
	// Memory cached by the device pool is not a leak: the check trims it.
	p, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(p, nil))
	rec = &recorder{}
	fake.check(rec, false)
	require.Empty(t, rec.msg)
}

// Misuse the driver catches fails the test at its end: here an
// hsa_amd_memory_unlock of memory never locked, called behind ompalloc's
// back (the HSA runtime returns success and does nothing; the fake counts
// it).
func TestMisuseCheck(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	before := fake.Counts().Misuse
	l, err := dl.Open(dl.Spec{Name: "fake hsa", Candidates: []string{fake.p.hsaLib}})
	require.NoError(t, err)
	unlock, err := l.Sym("hsa_amd_memory_unlock")
	require.NoError(t, err)
	buf := make([]byte, 4096)
	require.Zero(t, dlcall.Call(unlock, uintptr(unsafe.Pointer(&buf[0]))), "HSA_STATUS_SUCCESS, as ROCr answers")
	require.Equal(t, before+1, fake.Counts().Misuse)
	rec := &recorder{}
	fake.check(rec, true)
	require.Contains(t, rec.msg, "caught 1 misuse(s)")
	require.Contains(t, rec.msg, "hsa_amd_memory_unlock of memory not locked")
	fake.start.Misuse++ // the misuse was the test's point
}

// Without a C compiler New skips, saying why.
func TestSkipWithoutCompiler(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in a child")
	}
	out := inChild(t, "TestNoCompilerChild", "CC=ompalloc-no-such-cc", "TMPDIR="+t.TempDir())
	require.Contains(t, out, "--- SKIP: TestNoCompilerChild")
	require.Contains(t, out, "no fake GPU driver can be built here")
	require.Contains(t, out, "ompalloc-no-such-cc")
}

func TestNoCompilerChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestSkipWithoutCompiler")
	}
	New(t)
	t.Fatal("New did not skip")
}

// A New after ompalloc loaded its drivers fails, saying where to call it.
func TestTooLate(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in a child")
	}
	out := inChild(t, "TestTooLateChild", "OMPALLOC_DISABLE_CUDA=1")
	require.Contains(t, out, "--- PASS: TestTooLateChild")
}

func TestTooLateChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestTooLate")
	}
	n := target.NumDevices() // discovery, with CUDA disabled
	_, err := Start(CUDA(1))
	require.ErrorIs(t, err, ErrTooLate, "%d devices", n)
	require.ErrorContains(t, err, "before anything touches a device")
}

// A test binary's second New shares the driver: devices discovered again
// after target.Shutdown are still the fakes.
func TestAfterShutdown(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in a child")
	}
	out := inChild(t, "TestAfterShutdownChild")
	require.Contains(t, out, "--- PASS: TestAfterShutdownChild")
}

func TestAfterShutdownChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestAfterShutdown")
	}
	fake := New(t, HSA(2))
	require.Len(t, fake.Devices(), 2)
	require.NoError(t, target.Shutdown())
	again := New(t, HSA(2))
	ds := again.Devices()
	require.Len(t, ds, 2)
	require.Equal(t, "amdgpu", ds[1].Plugin())
	require.Equal(t, int64(-1), again.Calls("cuMemAlloc"), "no CUDA fake")
}

type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { r.msg += fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg += fmt.Sprintf(format, args...)
	panic("fatal")
}
func (r *recorder) Cleanup(func()) {}
