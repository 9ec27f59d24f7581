package amdgpu

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa/numatest"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A GPU's NUMA node is its PCI slot's, from the agent's BDF id and domain
// and sysfs (the two-socket fixture: 0000:41:00.0 on node 0, 0000:c1:00.0
// on node 1); a runtime that cannot say leaves -1 and the device usable.
func TestDeviceNUMANode(t *testing.T) {
	needFake(t)
	const name = "TestDeviceNUMANode"
	if os.Getenv(childEnv) == name {
		sysRoot = numatest.PCIRoot(t, "../../numa/testdata/two-socket")
		var got []string
		for _, d := range fakeDevices(t) {
			got = append(got, strconv.Itoa(d.Info().NUMANode))
			p, err := d.Alloc(plugin.MemDevice, 4096) // the node is a hint: no answer fails nothing
			require.NoError(t, err)
			require.NoError(t, d.Free(plugin.MemDevice, p))
		}
		require.Equal(t, os.Getenv("OMPALLOC_HSA_TEST_WANT"), strings.Join(got, ","))
		return
	}
	for _, tc := range []struct{ name, pci, want string }{
		{"both sockets", "0000:c1:00.0,0000:41:00.0", "1,0"},
		{"absent from sysfs", "0000:42:00.0,0000:41:00.0", "-1,0"},
		{"other domain", "0001:c1:00.0,0000:c1:00.0", "-1,1"},
		{"one known", "0000:c1:00.0", "1,-1"},
		{"runtime cannot say", "", "-1,-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inChild(t, name, "FAKEHSA_PCI="+tc.pci, "OMPALLOC_HSA_TEST_WANT="+tc.want)
		})
	}
}
