package cuda

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/warn"
)

// Issue 27 item 5: a cuCtxPopCurrent that fails after a call that worked
// used to turn the call's success into an error. After cuMemHostRegister
// the plugin forgot a registration the driver kept (IsPinned said true, the
// next lock of the range failed with 712); after cuMemHostUnregister it kept
// one the driver had dropped. Every pop of a lock and an unlock fails in
// turn here; each time the plugin's books must match the driver's: a lock
// that reports success is registered, one that reports failure is not, and
// the range locks and unlocks cleanly afterwards.
func TestPopFailureKeepsBooksTrue(t *testing.T) {
	d := dev(t, 0)
	const n = 1 << 16
	buf, _ := hostBuf(t, n)
	regs := live(t, liveRegistered)

	// How many pops one lock and one unlock make.
	pops := calls(t, "cuCtxPopCurrent")
	_, err := d.LockHost(buf, n)
	require.NoError(t, err)
	require.NoError(t, d.UnlockHost(buf))
	pops = calls(t, "cuCtxPopCurrent") - pops
	require.Greater(t, pops, 2)

	var out bytes.Buffer
	t.Cleanup(warn.SetOutput(&out))
	for nth := 1; nth <= pops; nth++ {
		t.Run(fmt.Sprintf("pop %d of %d", nth, pops), func(t *testing.T) {
			out.Reset()
			t.Setenv("FAKECUDA_FAIL", fmt.Sprintf("cuCtxPopCurrent:%d=201", nth))
			_, lockErr := d.LockHost(buf, n)
			if lockErr == nil {
				require.Equal(t, regs+1, live(t, liveRegistered), "a lock that succeeded is registered")
				require.NoError(t, d.UnlockHost(buf), "and unlocks")
			}
			require.Equal(t, regs, live(t, liveRegistered), "nothing registered after the unlock (or a failed lock)")
			t.Setenv("FAKECUDA_FAIL", "")
			_, err := d.LockHost(buf, n)
			require.NoError(t, err, "the range locks again (lock error: %v)", lockErr)
			require.NoError(t, d.UnlockHost(buf))
			require.Equal(t, regs, live(t, liveRegistered))
			require.Contains(t, out.String(), "cuCtxPopCurrent", "the pop's failure is a warning")
		})
	}
}
