package heap

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

// TestCallocFreshNotCleared: zeroed blocks cut from memory fresh from the
// source (zero-filled by the kernel, never used) are not cleared again;
// reused ones are, and every one of them reads as zero.
func TestCallocFreshNotCleared(t *testing.T) {
	// One P: a freed span cached on another P would make the next block
	// come from fresh pages, rightly not cleared, and the count below vary.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, tc := range []struct {
		name        string
		size, align uintptr
	}{
		{"small", 64, 16},
		{"small aligned 64", 64, 64},
		{"small 4 KiB", 4096, 16},
		{"medium 1 MiB", 1 << 20, 16},
		{"huge 3 MiB", 3 << 20, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(MapSource{}, Config{Name: t.Name(), KeepChunks: 1, KeepHuge: 64 << 20}) // keeps all the huge regions
			t.Cleanup(h.Close)
			h.countZeroed = true // this heap's count only: other tests' heaps cannot move it
			const n = 8
			var ps [n]uintptr
			alloc := func(what string, want uint64) {
				before := h.zeroedBytes.Load()
				for i := range ps {
					p, _, err := h.Alloc(tc.size, tc.align, 1, true)
					require.NoError(t, err)
					require.Zero(t, p%tc.align)
					b := cmem.Bytes(p, tc.size)
					require.Equal(t, -1, bytes.IndexFunc(b, func(r rune) bool { return r != 0 }), "%s block %d is zero", what, i)
					for j := range b {
						b[j] = 0xa5
					}
					ps[i] = p
				}
				require.Equal(t, want, h.zeroedBytes.Load()-before, "bytes cleared for %s blocks", what)
			}
			alloc("fresh", 0)
			for _, p := range ps {
				_, err := Free(p)
				require.NoError(t, err)
			}
			alloc("reused", n*uint64(tc.size))
			for _, p := range ps {
				_, err := Free(p)
				require.NoError(t, err)
			}
		})
	}
}

// TestOwnerFitsHeader: a small block's header keeps the owner in 16 bits;
// a larger owner is refused, not truncated (large blocks keep 32).
func TestOwnerFitsHeader(t *testing.T) {
	h := newTestHeap(t)
	_, _, err := h.Alloc(64, 16, maxOwner+1, false)
	require.ErrorIs(t, err, ErrTooLarge)
	p, _, err := h.Alloc(64, 16, maxOwner, false)
	require.NoError(t, err)
	b, err := Free(p)
	require.NoError(t, err)
	require.Equal(t, uint32(maxOwner), b.Owner)
	require.Equal(t, uintptr(64), b.Size)
	require.Equal(t, uintptr(80), b.Footprint, "64 bytes + the 8-byte header, rounded to 16")
}

// TestNewestHugeRegionKept: a freed huge region that fits the heap's budget
// is kept even when older kept regions fill it (they are released first), so
// a loop of alloc+free of a big buffer reuses its region instead of mapping
// one each time.
func TestNewestHugeRegionKept(t *testing.T) {
	h := New(MapSource{}, Config{Name: t.Name(), KeepHuge: 64 << 20})
	t.Cleanup(h.Close)
	small, _, err := h.Alloc(16<<20, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(small)
	require.NoError(t, err)
	require.Equal(t, uintptr(16<<20), h.Stats().Retained)
	big, _, err := h.Alloc(64<<20, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(big)
	require.NoError(t, err)
	require.Equal(t, uintptr(64<<20), h.Stats().Retained, "the 64 MiB region is kept, the 16 MiB one released")
	again, _, err := h.Alloc(64<<20, 16, 1, false)
	require.NoError(t, err)
	require.Equal(t, big, again, "and reused")
	_, err = Free(again)
	require.NoError(t, err)
}
