package numa_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

const (
	pg  = 4096
	mib = 1 << 20
)

func TestPlan(t *testing.T) {
	two := numa.Read("testdata/two-socket").IDs()
	xm := numa.Read("testdata/xeon-max-flat")
	hbm := xm.Tiers().HighBw
	cases := []struct {
		name string
		n    uintptr
		spec numa.Spec
		all  []int
		want []numa.Part
	}{
		{"environment sets nothing", 4 * mib, numa.Spec{Partition: numa.Environment}, two, nil},
		{"nearest on all nodes is local", 4 * mib, numa.Spec{Partition: numa.Nearest}, two, []numa.Part{{0, 4 * mib, numa.ModeLocal, nil}}},
		{"nearest on a node list prefers its first", 4 * mib, numa.Spec{Partition: numa.Nearest, Nodes: []int{3, 2}}, xm.IDs(),
			[]numa.Part{{0, 4 * mib, numa.ModePreferred, []int{3}}}},
		{"blocked over two sockets", 4 * mib, numa.Spec{Partition: numa.Blocked}, two, []numa.Part{
			{0, 2 * mib, numa.ModeBind, []int{0}}, {2 * mib, 2 * mib, numa.ModeBind, []int{1}}}},
		{"blocked over the HBM nodes", 4 * mib, numa.Spec{Partition: numa.Blocked, Nodes: hbm}, xm.IDs(), []numa.Part{
			{0, 2 * mib, numa.ModeBind, []int{2}}, {2 * mib, 2 * mib, numa.ModeBind, []int{3}}}},
		{"blocked parts are whole pages, the last is shorter", 5 * pg, numa.Spec{Partition: numa.Blocked, Nodes: []int{0, 1, 2}}, nil, []numa.Part{
			{0, 2 * pg, numa.ModeBind, []int{0}}, {2 * pg, 2 * pg, numa.ModeBind, []int{1}}, {4 * pg, pg, numa.ModeBind, []int{2}}}},
		{"blocked over more nodes than pages", 2 * pg, numa.Spec{Partition: numa.Blocked, Nodes: []int{0, 1, 2, 3}}, nil, []numa.Part{
			{0, pg, numa.ModeBind, []int{0}}, {pg, pg, numa.ModeBind, []int{1}}}},
		{"interleaved by page", 4 * mib, numa.Spec{Partition: numa.Interleaved}, xm.IDs(), []numa.Part{{0, 4 * mib, numa.ModeInterleave, []int{0, 1, 2, 3}}}},
		{"interleaved part_size of a page is by page", 4 * mib, numa.Spec{Partition: numa.Interleaved, PartSize: 100}, two, []numa.Part{{0, 4 * mib, numa.ModeInterleave, []int{0, 1}}}},
		{"interleaved part_size rounded up to pages", 5 * pg, numa.Spec{Partition: numa.Interleaved, PartSize: pg + 1}, two, []numa.Part{
			{0, 2 * pg, numa.ModeBind, []int{0}}, {2 * pg, 2 * pg, numa.ModeBind, []int{1}}, {4 * pg, pg, numa.ModeBind, []int{0}}}},
		{"part_size raised to range/MaxParts", 4 * mib, numa.Spec{Partition: numa.Interleaved, PartSize: 2 * pg}, two, interleavedBy(4*mib, 4*mib/numa.MaxParts, []int{0, 1})},
		{"one node binds whole", 4 * mib, numa.Spec{Partition: numa.Interleaved, PartSize: mib}, []int{0}, []numa.Part{{0, 4 * mib, numa.ModeBind, []int{0}}}},
		{"blocked on one node binds whole", 4 * mib, numa.Spec{Partition: numa.Blocked}, []int{0}, []numa.Part{{0, 4 * mib, numa.ModeBind, []int{0}}}},
		{"repeated nodes count once", 4 * pg, numa.Spec{Partition: numa.Blocked, Nodes: []int{1, 1, 0}}, nil, []numa.Part{
			{0, 2 * pg, numa.ModeBind, []int{1}}, {2 * pg, 2 * pg, numa.ModeBind, []int{0}}}},
		{"environment on a node subset binds to it", 4 * mib, numa.Spec{Nodes: []int{2, 3}}, xm.IDs(), []numa.Part{{0, 4 * mib, numa.ModeBind, []int{2, 3}}}},
		{"empty range", 0, numa.Spec{Partition: numa.Blocked}, two, nil},
		{"unknown partition sets nothing", 4 * mib, numa.Spec{Partition: 9}, two, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := numa.Plan(c.n, pg, c.spec, c.all)
			require.Equal(t, c.want, got)
			var end uintptr
			for _, p := range got {
				require.Equal(t, end, p.Off, "parts are contiguous")
				require.Zero(t, p.Len%pg)
				end += p.Len
			}
			if got != nil {
				require.Equal(t, c.n, end, "parts cover the range")
			}
		})
	}
}

func interleavedBy(n, ps uintptr, nodes []int) []numa.Part {
	var out []numa.Part
	for i, off := 0, uintptr(0); off < n; i, off = i+1, off+ps {
		out = append(out, numa.Part{Off: off, Len: ps, Mode: numa.ModeBind, Nodes: nodes[i%len(nodes) : i%len(nodes)+1]})
	}
	return out
}

func TestSpecKeyAndNames(t *testing.T) {
	a := numa.Spec{Partition: numa.Blocked, Nodes: []int{0, 1}}
	b := numa.Spec{Partition: numa.Blocked, Nodes: []int{0, 1}}
	require.Equal(t, a.Key(), b.Key())
	require.NotEqual(t, a.Key(), numa.Spec{Partition: numa.Interleaved, Nodes: []int{0, 1}}.Key())
	require.NotEqual(t, a.Key(), numa.Spec{Partition: numa.Blocked, Nodes: []int{0}}.Key())
	require.Equal(t, "interleave", numa.ModeInterleave.String())
	require.Equal(t, "bind", numa.ModeBind.String())
	require.Equal(t, "mode(42)", numa.Mode(42).String())
	require.Equal(t, "blocked", numa.Blocked.String())
}
