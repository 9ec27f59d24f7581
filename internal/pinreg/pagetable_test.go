package pinreg

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// nodes counts the table's nodes (inner and leaf, root included); for tests.
func (t *pageTable) nodes() int {
	var walk func(n *ptInner, sh uint) int
	walk = func(n *ptInner, sh uint) int {
		c := 1
		for i := range n.slots {
			s := &n.slots[i]
			if sh == ptBits {
				if s.leaf.Load() != nil {
					c++
				}
			} else if ch := s.child.Load(); ch != nil {
				c += walk(ch, sh-ptBits)
			}
		}
		return c
	}
	return walk(&t.root, topShift)
}

func TestPageTableBlocks(t *testing.T) {
	tests := []struct {
		name  string
		p, n  uintptr
		nodes int // root included
	}{
		{"one page", 0x7f00_0000_0000, 4096, 6},
		{"2 MiB aligned: a block in the last inner level", 0x7f00_0020_0000, 2 << 20, 5},
		{"1 GiB aligned: a block two levels up", 0x7f00_4000_0000, 1 << 30, 4},
		{"1 GiB and a page: the block plus a leaf", 0x7f00_4000_0000, 1<<30 + 4096, 6},
		{"unaligned 2 MiB: two leaves", 0x7f00_0020_0800, 2 << 20, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(newFake())
			_, err := r.Lock(tt.p, tt.n)
			require.NoError(t, err)
			require.Equal(t, tt.nodes, r.pt.nodes())
			for _, off := range []uintptr{0, 1, tt.n / 2, tt.n - 1} {
				dev, ok := r.Lookup(tt.p + off)
				require.True(t, ok)
				require.Equal(t, tt.p+off+devOffset, dev)
			}
			for _, q := range []uintptr{tt.p - 1, tt.p + tt.n} {
				_, ok := r.Lookup(q)
				require.False(t, ok, "%#x", q)
			}
			require.NoError(t, r.Unlock(tt.p))
			require.Equal(t, 1, r.pt.nodes())
		})
	}
}

func TestPageTableHints(t *testing.T) {
	// Regions 64 GiB apart share a hint slot; each insert takes the hint
	// over, and finds elsewhere fall back to the full walk.
	r := New(newFake())
	var ps []uintptr
	for i := 0; i < 4; i++ {
		p := uintptr(0x7f00_0000_0000) + uintptr(i)<<36 + 4096
		ps = append(ps, p)
		_, err := r.Lock(p, 100)
		require.NoError(t, err)
	}
	check := func(live []uintptr) {
		t.Helper()
		for _, p := range ps {
			want := false
			for _, q := range live {
				want = want || q == p
			}
			_, ok := r.Lookup(p + 50)
			require.Equal(t, want, ok, "%#x", p)
		}
		checkIndex(t, r)
	}
	check(ps)
	require.NoError(t, r.Unlock(ps[3])) // the hinted one: its node is freed
	check(ps[:3])
	require.NoError(t, r.Unlock(ps[0]))
	check(ps[1:3])
	_, err := r.Lock(ps[0], 100)
	require.NoError(t, err)
	check(ps[:3])
	for _, p := range ps[:3] {
		require.NoError(t, r.Unlock(p))
	}
	require.Equal(t, 1, r.pt.nodes())
	for i := range r.pt.hint {
		require.Nil(t, r.pt.hint[i].Load(), "hint %d outlives its node", i)
	}
}

// TestPageTableSharedPage: ranges sharing one page, locked in any order
// and with gaps between them, are each found from every byte they hold,
// and no gap byte finds any: the page's list is searched, not scanned, so
// its order matters. Unlocking every other one leaves the rest found.
func TestPageTableSharedPage(t *testing.T) {
	const page = uintptr(0x7f00_0000_3000)
	for _, tc := range []struct {
		name       string
		size, step uintptr // each range's bytes, and the distance between starts
		count      int
	}{
		{"two", 100, 2048, 2},
		{"three, unequal gaps", 500, 1300, 3},
		{"128 of 32 B, touching", 32, 32, 128},
		{"200 of 16 B with 4 B gaps", 16, 20, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(newFake())
			starts := make([]uintptr, tc.count)
			for i := range starts {
				starts[i] = page + uintptr(i)*tc.step
			}
			for _, i := range rand.Perm(tc.count) { // the list's order is the tree's, not the locks'
				_, err := r.Lock(starts[i], tc.size)
				require.NoError(t, err)
			}
			owner := func(q uintptr) (uintptr, bool) {
				for _, s := range starts {
					if q >= s && q < s+tc.size {
						return s, true
					}
				}
				return 0, false
			}
			check := func(live func(s uintptr) bool) {
				t.Helper()
				for q := page; q < page+4096; q++ {
					s, in := owner(q)
					e, ok := r.Entry(q)
					if !in || !live(s) {
						require.False(t, ok, "%#x: in no locked range", q)
						continue
					}
					require.True(t, ok, "%#x: in [%#x, +%d)", q, s, tc.size)
					require.Equal(t, s, e.Host, "%#x", q)
				}
			}
			check(func(uintptr) bool { return true })
			for i := 0; i < tc.count; i += 2 {
				require.NoError(t, r.Unlock(starts[i]))
			}
			check(func(s uintptr) bool { return (s-page)/tc.step%2 == 1 })
		})
	}
}
