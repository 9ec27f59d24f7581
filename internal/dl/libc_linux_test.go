package dl

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fault"
)

// Issue 23 item 6: at vm.max_map_count the munmap that trims an aligned
// mapping's slack fails (ENOMEM: it would split a mapping), and MapAligned
// returned the error with the whole oversized mapping still mapped: 8 MiB
// owned by nothing per refused 4 MiB chunk. A failed trim of the head or of
// the tail must leave nothing mapped.
func TestMapAlignedFailedTrimLeavesNothingMapped(t *testing.T) {
	c, err := C()
	require.NoError(t, err)
	const n, align = 4 << 20, 4 << 20
	for _, nth := range []int{1, 2} { // the first trim (head, or the tail when the head is 0), the second
		var raw, rawN, unmapped uintptr
		mappedHook = func(p, n uintptr) { raw, rawN = p, n }
		unmappedHook = func(p, n uintptr) { unmapped += n } // MapAligned's own munmaps: disjoint ranges of raw
		disarm := fault.Arm(fault.MapTrim, nth, syscall.ENOMEM)
		t.Cleanup(func() { mappedHook, unmappedHook = nil, nil; disarm() })
		p, err := c.MapAligned(n, align)
		disarm()
		mappedHook, unmappedHook = nil, nil
		if err == nil { // the mapping came aligned: one trim only, and nth 2 never fired
			require.Equal(t, 2, nth, "the first trim was armed to fail")
			require.Zero(t, fault.Fired(fault.MapTrim))
			require.NoError(t, c.Unmap(p, n))
			continue
		}
		require.True(t, errors.Is(err, syscall.ENOMEM), "the trim's errno stays in the error: %v", err)
		require.ErrorContains(t, err, "vm.max_map_count reached", "the limit that made munmap refuse is named")
		require.ErrorContains(t, err, "sysctl -w vm.max_map_count=", "and how to raise it")
		require.Equal(t, 1, fault.Fired(fault.MapTrim))
		require.NotZero(t, raw)
		// What MapAligned unmapped, not what mincore sees afterwards: once
		// unmapped, the range may be mapped again at once by another thread
		// of the process (seen in CI), and mincore would count that.
		require.Equal(t, rawN, unmapped, "trim %d failed: bytes of the %d-byte mapping at %#x left mapped", nth, rawN, raw)
	}
}
