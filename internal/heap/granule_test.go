package heap

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
)

// granuleSource maps every region alone in a whole granule and remembers
// the last, so that a test can stand for whatever the kernel would map in
// the granule's tail past a region smaller than 4 MiB.
type granuleSource struct {
	last, lastN uintptr
}

func (s *granuleSource) Acquire(n, align uintptr) (uintptr, error) {
	c, err := dl.C()
	if err != nil {
		return 0, err
	}
	m := roundUp(n, chunkSize)
	p, err := c.MapAligned(m, max(align, chunkSize))
	if err != nil {
		return 0, err
	}
	s.last, s.lastN = p, m
	return p, nil
}

func (s *granuleSource) Release(p, n uintptr) error {
	c, err := dl.C()
	if err != nil {
		return err
	}
	return c.Unmap(p, roundUp(n, chunkSize))
}

// An address past a huge region's end, in the region's last granule, is
// not the heap's: Free, Inspect, Room and Containing call it foreign
// (alloc then asks the target blocks, which may live there), live region
// or freed. The fuzz of internal/reliability found Realloc of such an
// address calling it a double free, where the kernel had put its foreign
// mapping after a freed 2.1 MiB region.
func TestHugeRegionTailIsForeign(t *testing.T) {
	src := &granuleSource{}
	h := New(src, Config{Name: t.Name(), KeepHuge: 64 << 20})
	t.Cleanup(h.Close)
	const size = 2<<20 + 12800 // a huge block: 2 MiB + 64 KiB of region
	p, _, err := h.Alloc(size, 16, 1, false)
	require.NoError(t, err)
	require.Equal(t, src.last, p, "the region starts its granule")
	tail := p + roundUp(size, pageSize) // the first byte past the region
	require.Less(t, tail, src.last+src.lastN, "the tail is in the region's granule")

	check := func(state string) {
		for _, q := range []uintptr{tail, tail + 0x190, src.last + chunkSize - 16} {
			_, err := Free(q)
			require.ErrorIs(t, err, ErrForeign, "%s region: Free(%#x)", state, q)
			_, err = Inspect(q)
			require.ErrorIs(t, err, ErrForeign, "%s region: Inspect(%#x)", state, q)
			_, _, err = Room(q)
			require.ErrorIs(t, err, ErrForeign, "%s region: Room(%#x)", state, q)
			_, _, ok := Containing(q)
			require.False(t, ok, "%s region: Containing(%#x)", state, q)
		}
	}
	check("a live")
	_, err = Free(p)
	require.NoError(t, err)
	require.Equal(t, 1, h.Stats().Huge, "the freed region is kept")
	check("a freed")

	// The region's own bytes are still the heap's.
	_, err = Free(p + 4096)
	require.ErrorIs(t, err, ErrInvalid, "inside the freed region")
}
