package heap

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/fault"
)

// A chunk or region that cannot be mapped fails the allocation with
// ErrNoMemory, leaves the heap as it was, and the next allocation works.
func TestAcquireFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uintptr
	}{
		{"small block, new chunk", 100},
		{"medium block, new chunk", 1 << 20},
		{"huge region", 9 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(MapSource{}, Config{Name: "fault", KeepChunks: 1})
			defer h.Close()
			disarm := fault.Arm(fault.HeapAcquire, 1, nil)
			_, _, err := h.Alloc(tc.size, 16, 7, false)
			require.ErrorIs(t, err, ErrNoMemory)
			require.ErrorIs(t, err, fault.ErrInjected)
			require.Equal(t, 1, fault.Fired(fault.HeapAcquire))
			require.Equal(t, Stats{}, h.Stats(), "nothing was taken from the source")

			p, _, err := h.Alloc(tc.size, 16, 7, true)
			require.NoError(t, err, "the next allocation succeeds")
			require.Equal(t, 2, fault.Calls(fault.HeapAcquire))
			disarm()
			b := cmem.Bytes(p, tc.size)
			require.Zero(t, b[0]|b[tc.size-1])
			b[0], b[tc.size-1] = 1, 2
			blk, err := Free(p)
			require.NoError(t, err)
			require.Equal(t, tc.size, blk.Size)
			h.Trim()
			require.Zero(t, h.Stats().Mapped, "everything returns to the source")
		})
	}
}

// Every call failing: nothing is half-made and blocks already handed out
// stay intact.
func TestAcquireFaultEveryCallKeepsLiveBlocks(t *testing.T) {
	h := New(MapSource{}, Config{Name: "fault-every"})
	defer h.Close()
	p, _, err := h.Alloc(64, 16, 1, false)
	require.NoError(t, err)
	b := cmem.Bytes(p, 64)
	for i := range b {
		b[i] = byte(i)
	}
	before := h.Stats()
	disarm := fault.Arm(fault.HeapAcquire, 0, nil)
	for range 5 {
		_, _, err := h.Alloc(8<<20, 16, 1, false)
		require.ErrorIs(t, err, fault.ErrInjected)
	}
	disarm()
	require.Equal(t, before, h.Stats())
	for i := range b {
		require.Equal(t, byte(i), b[i])
	}
	_, err = Free(p)
	require.NoError(t, err)
}
