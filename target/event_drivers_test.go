package target

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const eventChildEnv = "OMPALLOC_TARGET_EVENT_CHILD"

// TestEventFakeDrivers runs TestEventFakeDriversChild in a child process
// whose CUDA and HSA plugins load the fake C drivers (devices 0 and 1 are
// CUDA, 2 and 3 AMD): the event rules that need a driver's waits.
func TestEventFakeDrivers(t *testing.T) {
	if os.Getenv(eventChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEventFakeDriversChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(),
		eventChildEnv+"=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=300",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=2", "FAKEHSA_COPY_DELAY_US=300",
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestEventFakeDriversChild", "%s", out)
	t.Logf("%s", out)
}

func TestEventFakeDriversChild(t *testing.T) {
	if os.Getenv(eventChildEnv) == "" {
		t.Skip("run by TestEventFakeDrivers")
	}
	require.Equal(t, 4, NumDevices())
	for _, s := range Plugins() {
		require.NoError(t, s.Err, "%s: %s", s.Plugin, s.Init)
	}
	for _, dev := range []int{0, 2} {
		d, _ := Get(dev)
		t.Run(fmt.Sprintf("wait does not hold the event/%v", d), func(t *testing.T) { eventWaitHoldsNothing(t, d) })
	}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		a, _ := Get(pair[0])
		b, _ := Get(pair[1])
		t.Run(fmt.Sprintf("elapsed of two devices/%v and %v", a, b), func(t *testing.T) { elapsedTwoDevices(t, a, b) })
	}
}

// elapsedTwoDevices: Elapsed between complete timing events of two devices
// of one plugin is refused with ErrInvalidArgument naming both devices
// (CUDA: "cudaEventElapsedTime() will fail if the two input events are
// associated to different devices"; each device has its own clock). Before
// the fix the CUDA plugin returned a duration of no meaning.
func elapsedTwoDevices(t *testing.T, a, b *Device) {
	var evs []*Event
	for _, d := range []*Device{a, b} {
		q, err := d.NewQueue()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, q.Close()) })
		ev, err := d.NewEvent(true)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, ev.Close()) })
		require.NoError(t, ev.Record(q))
		require.NoError(t, ev.Synchronize(context.Background()))
		evs = append(evs, ev)
	}
	_, err := Elapsed(evs[0], evs[1])
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, fmt.Sprintf("device %d and %d", a.ID, b.ID))
	require.ErrorContains(t, err, "one device")
}

// fakeCount reads a counter of the fake driver of d: for CUDA the calls of
// a function (fakecuda_calls) or, for "misuse", fakecuda_event_misuse; for
// HSA fakehsa_count(what).
func fakeCount(t *testing.T, d *Device, what string) int64 {
	t.Helper()
	b := append([]byte(what), 0)
	defer runtime.KeepAlive(b)
	if d.Plugin() == "cuda" {
		lib := os.Getenv("OMPALLOC_CUDA_LIBRARY")
		if what == "misuse" {
			return int64(dlcall.Call(hook(t, lib, "fakecuda_event_misuse")))
		}
		return int64(dlcall.Call(hook(t, lib, "fakecuda_calls"), uintptr(unsafe.Pointer(&b[0]))))
	}
	if what == "misuse" {
		b = append([]byte("waited_destroys"), 0)
	}
	return int64(dlcall.Call(hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_count"), uintptr(unsafe.Pointer(&b[0]))))
}

// eventWaitHoldsNothing: while one goroutine waits in Synchronize for work
// held at the fake's gate, Query, WaitEvent, Record (the event moved during
// the wait) and Close from another return without waiting for the device,
// the wait ends once the work is let go, and the driver's event (HSA: the
// signal) is never destroyed under the wait. Before the fix Synchronize
// held the event's mutex across the driver's wait: Query blocked until the
// gate opened ("Query blocked the host").
func eventWaitHoldsNothing(t *testing.T, d *Device) {
	const n = 1 << 16
	buf, err := AllocArray[byte](d, MemDevice, n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, buf.Free()) })
	q, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	q2, err := d.NewQueue()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q2.Close()) })
	ev, err := d.NewEvent(false)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ev.Close()) })
	misuse := fakeCount(t, d, "misuse")

	release := holdWork(t, d)
	src := make([]byte, n)
	src[0] = 3
	require.NoError(t, CopyToDevice(buf, src, q))
	require.NoError(t, ev.Record(q))

	// The waiter is in the driver's wait once the fake saw it there.
	waitCalls := func() int64 {
		if d.Plugin() == "cuda" {
			return fakeCount(t, d, "cuEventSynchronize")
		}
		return fakeCount(t, d, "waiting")
	}
	before := waitCalls()
	waited := make(chan error, 1)
	go func() { waited <- ev.Synchronize(context.Background()) }()
	require.Eventually(t, func() bool { return waitCalls() > before }, 10*time.Second, 100*time.Microsecond,
		"Synchronize never reached the driver's wait")

	returns(t, release, "Query", func() error {
		ok, err := ev.Query()
		if err == nil && ok {
			err = fmt.Errorf("complete while the work is held")
		}
		return err
	})
	returns(t, release, "WaitEvent", func() error { return q2.WaitEvent(ev) })
	returns(t, release, "Record", func() error { return ev.Record(q) })
	returns(t, release, "Close", ev.Close)
	require.ErrorIs(t, ev.Record(q), ErrInvalidArgument, "closed")
	select {
	case err := <-waited:
		t.Fatalf("Synchronize returned (%v) while the work is held", err)
	default:
	}

	release()
	select {
	case err := <-waited:
		require.NoError(t, err, "the wait ends normally after Close")
	case <-time.After(30 * time.Second):
		t.Fatal("Synchronize did not return once the work was let go")
	}
	require.NoError(t, q.Synchronize(context.Background()))
	require.NoError(t, q2.Synchronize(context.Background()))
	require.Equal(t, misuse, fakeCount(t, d, "misuse"), "the driver's event was destroyed under a wait")
	back := make([]byte, n)
	require.NoError(t, CopyFromDevice(back, buf, q))
	require.NoError(t, q.Synchronize(context.Background()))
	require.Equal(t, src, back)
}
