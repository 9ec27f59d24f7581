package heap

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoomAndResizeInPlace(t *testing.T) {
	h := newTestHeap(t)
	for _, tc := range []struct {
		size, align uintptr
	}{
		{1, 16}, {100, 16}, {100, 64}, {4000, 64}, {40 << 10, 64}, {1<<20 + 1, 64}, {5 << 20, 64},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.size, tc.align), func(t *testing.T) {
			p, foot, err := h.Alloc(tc.size, tc.align, 9, true)
			require.NoError(t, err)
			b, room, err := Room(p)
			require.NoError(t, err)
			require.Equal(t, tc.size, b.Size)
			require.Equal(t, uint32(9), b.Owner)
			require.GreaterOrEqual(t, room, tc.size)
			require.LessOrEqual(t, room, foot, "room lies inside the footprint")

			// Growing to the room stays put; one byte more does not.
			old, ok, err := Resize(p, room)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, tc.size, old.Size)
			nb, err := Inspect(p)
			require.NoError(t, err)
			require.Equal(t, room, nb.Size)
			require.Equal(t, b.Footprint, nb.Footprint, "the footprint is unchanged")
			_, ok, err = Resize(p, room+1)
			require.NoError(t, err)
			require.False(t, ok)
			_, ok, _ = Resize(p, 0)
			require.False(t, ok, "size 0 is a free, not a resize")

			// Shrinking always fits; Free reports the size last recorded.
			_, ok, err = Resize(p, 1)
			require.NoError(t, err)
			require.True(t, ok)
			fb, err := Free(p)
			require.NoError(t, err)
			require.Equal(t, uintptr(1), fb.Size)

			// A freed huge region is unmapped (the test heap keeps none).
			_, _, err = Room(p)
			require.True(t, errors.Is(err, ErrDoubleFree) || errors.Is(err, ErrForeign), "%v", err)
			_, ok, err = Resize(p, 1)
			require.True(t, errors.Is(err, ErrDoubleFree) || errors.Is(err, ErrForeign), "%v", err)
			require.False(t, ok)
		})
	}
}

func TestResizeRefusesBadPointers(t *testing.T) {
	h := newTestHeap(t)
	p, _, err := h.Alloc(100, 16, 1, false)
	require.NoError(t, err)
	defer Free(p)
	q, _, err := h.Alloc(1<<20, 16, 1, false)
	require.NoError(t, err)
	defer Free(q)
	var local [64]byte
	for _, tc := range []struct {
		p    uintptr
		want error
	}{
		{p + 16, ErrInvalid},
		{q + 4096, ErrInvalid},
		{uintptr(unsafePointer(&local[0])), ErrForeign},
	} {
		_, _, err := Room(tc.p)
		require.ErrorIs(t, err, tc.want)
		_, ok, err := Resize(tc.p, 8)
		require.ErrorIs(t, err, tc.want)
		require.False(t, ok)
	}
	b, err := Inspect(p)
	require.NoError(t, err)
	require.Equal(t, uintptr(100), b.Size, "nothing changed")
}
