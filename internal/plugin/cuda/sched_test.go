package cuda

import (
	"os"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// A device's primary context is activated with CU_CTX_SCHED_BLOCKING_SYNC
// unless OMPALLOC_CUDA_SCHED chooses otherwise; a context someone else
// activated first keeps its flags. Each case runs in a fresh process: the
// flags only count when the context is activated. Events the host waits
// for are CU_EVENT_BLOCKING_SYNC when the scheduling asked for is blocking
// (whoever activated the context), and CU_EVENT_DISABLE_TIMING unless
// they time (before: never BLOCKING_SYNC, so an event wait spun a core).
func TestSchedFlags(t *testing.T) {
	needFake(t)
	for _, tc := range []struct {
		env, want string
	}{
		{"", "4"},
		{"blocking", "4"},
		{"spin", "1"},
		{"yield", "2"},
		{"auto", "0"},
		{"bogus", "4"},
		{"active", "0"}, // activated by another library before Open, with AUTO
	} {
		t.Run(tc.env, func(t *testing.T) {
			env := []string{"OMPALLOC_CUDA_TEST_WANT=" + tc.want, "FAKECUDA_FAIL="}
			if tc.env == "active" {
				env = append(env, "OMPALLOC_CUDA_TEST_ACTIVE=1", EnvSched+"=")
			} else {
				env = append(env, EnvSched+"="+tc.env)
			}
			runChild(t, "TestSchedFlagsChild", env...)
		})
	}
}

func TestSchedFlagsChild(t *testing.T) {
	inChild(t)
	want, err := strconv.Atoi(os.Getenv("OMPALLOC_CUDA_TEST_WANT"))
	require.NoError(t, err)
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	d := p.devices[0]
	if os.Getenv("OMPALLOC_CUDA_TEST_ACTIVE") != "" {
		var ctx uintptr
		require.Zero(t, call(rawSym(t, "cuDevicePrimaryCtxRetain"), uintptr(unsafe.Pointer(&ctx)), 0))
		defer call(rawSym(t, "cuDevicePrimaryCtxRelease_v2"), 0)
	}
	require.NoError(t, d.Open())
	require.Equal(t, want, int(int32(call(hookFn(t, "fakecuda_ctx_flags_when_active"), 0))), "the flags the context was activated with")
	blocking := uint32(0)
	if want == cuCtxSchedBlockingSync || os.Getenv("OMPALLOC_CUDA_TEST_ACTIVE") != "" { // blocking asked for
		blocking = cuEventBlockingSync
	}
	for _, timing := range []bool{false, true} {
		ev, err := d.NewEvent(timing)
		require.NoError(t, err)
		flags := blocking
		if !timing {
			flags |= cuEventDisableTiming
		}
		require.Equal(t, flags, uint32(call(hookFn(t, "fakecuda_last_event_flags"))), "the flags of an event (timing %v)", timing)
		require.NoError(t, ev.Destroy())
	}
	// A queue's own event (Queue.Record: the tail a failed synchronize
	// leaves for Close to wait on) takes the same flags as a non-timing one.
	qi, err := d.NewQueue()
	require.NoError(t, err)
	q := qi.(*Queue)
	ev, err := q.Record()
	require.NoError(t, err)
	require.Equal(t, blocking|cuEventDisableTiming, uint32(call(hookFn(t, "fakecuda_last_event_flags"))), "the flags of a queue's event")
	require.NoError(t, ev.Destroy())
	require.NoError(t, q.Destroy())
	require.NoError(t, d.Close())
	require.NoError(t, p.devices[1].Close())
}
