package pcpu

import (
	"syscall"
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// Issue 23 item 3: where the kernel refuses membarrier after registration
// (a seccomp filter installed later), Barrier stops the world instead of
// panicking, and still orders the plain stores: the litmus test passes with
// the fallback forced (each round a garbage collection, so fewer rounds).
// internal/reliability.TestSandboxDeniesMembarrier refuses it for real.
func TestBarrierFallbackOrdersPlainStores(t *testing.T) {
	if !HasBarrier {
		t.Skip("no membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) here (or a race build)")
	}
	require.True(t, barrierErr.CompareAndSwap(0, uintptr(syscall.EPERM)), "no refusal seen before")
	t.Cleanup(func() { barrierErr.Store(0) })
	require.NotPanics(t, Barrier)
	require.ErrorIs(t, BarrierRefused(), syscall.EPERM)
	rounds := int64(200)
	if testing.Short() || !testenv.LongTests() {
		rounds = 50 // 200 in the long run (testenv.LongEnv)
	}
	storeBuffering(t, rounds)
}
