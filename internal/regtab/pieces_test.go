package regtab

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A run of pages longer than MaxPiece is registered in consecutive pieces
// of at most MaxPiece bytes (CUDA: single registrations of 512 GiB and more
// fail, so its plugin asks for 64 GiB pieces).
func TestPieces(t *testing.T) {
	const G, max64 = 1 << 30, 64 << 30
	for _, tc := range []struct {
		name    string
		p, n    uintptr
		max     uintptr
		wantLen int
		last    uintptr
	}{
		{"small", 4096, 100, max64, 1, 100},
		{"exactly max", 4096, max64, max64, 1, max64},
		{"max plus one", 4096, max64 + 1, max64, 2, 1},
		{"130 GiB", 1 << 40, 130 * G, max64, 3, 2 * G},
		{"512 GiB", 1 << 40, 512 * G, max64, 8, max64},
		{"small max", 10, 10, 3, 4, 1},
		{"no limit", 4096, 512 * G, 0, 1, 512 * G},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := New[int, int](Config[int]{MaxPiece: tc.max})
			ps := tab.pieces(nil, Span{tc.p, tc.n})
			require.Len(t, ps, tc.wantLen)
			at, sum := tc.p, uintptr(0)
			for _, pc := range ps {
				require.Equal(t, at, pc.Host, "pieces are consecutive")
				if tc.max != 0 {
					require.LessOrEqual(t, pc.Size, tc.max)
				}
				require.NotZero(t, pc.Size)
				at, sum = at+pc.Size, sum+pc.Size
			}
			require.Equal(t, tc.n, sum)
			require.Equal(t, tc.last, ps[len(ps)-1].Size)
		})
	}
}
