package numa_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/numa/numatest"
)

func TestPCINode(t *testing.T) {
	roots := map[string]string{"testdata/none": "testdata/none"}
	for _, f := range []string{"testdata/two-socket", "testdata/single"} {
		roots[f] = numatest.PCIRoot(t, f) // the fixtures' bus ids without ':' (numatest)
	}
	cases := []struct {
		root, id string
		node     int
		ok       bool
	}{
		{"testdata/two-socket", "0000:41:00.0", 0, true},
		{"testdata/two-socket", "00000000:C1:00.0", 1, true}, // as cuDeviceGetPCIBusId writes it
		{"testdata/two-socket", "c1:00.0", 1, true},
		{"testdata/two-socket", "0000:c1:00.0\x00\x00", 1, true},
		{"testdata/two-socket", "0000:42:00.0", -1, false}, // absent
		{"testdata/single", "0000:01:00.0", -1, false},     // the kernel says -1
		{"testdata/two-socket", "../../etc", -1, false},
		{"testdata/two-socket", "0000:41:00", -1, false},
		{"testdata/two-socket", "0000:41:20.0", -1, false},
		{"testdata/none", "0000:41:00.0", -1, false},
	}
	for _, c := range cases {
		t.Run(c.root+"/"+c.id, func(t *testing.T) {
			n, ok := numa.PCINode(roots[c.root], c.id)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.node, n)
		})
	}
}
