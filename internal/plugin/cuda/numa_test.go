package cuda

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa/numatest"
)

// A device's NUMA node is its PCI slot's, from cuDeviceGetPCIBusId and
// sysfs (the two-socket fixture: 0000:41:00.0 on node 0, 0000:c1:00.0 on
// node 1); a driver that cannot say leaves -1 and the device usable.
func TestDeviceNUMANode(t *testing.T) {
	needFake(t)
	for _, tc := range []struct{ name, env, want string }{
		{"both sockets", "FAKECUDA_PCI_BUS_IDS=0000:C1:00.0,0000:41:00.0", "1,0"},
		{"absent from sysfs", "FAKECUDA_PCI_BUS_IDS=0000:42:00.0,0000:41:00.0", "-1,0"},
		{"driver refuses", "FAKECUDA_PCI_BUS_IDS=", "-1,-1"},
		{"call fails", "FAKECUDA_PCI_BUS_IDS=0000:C1:00.0,0000:41:00.0 FAKECUDA_FAIL=cuDeviceGetPCIBusId:1=101", "-1,0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runChild(t, "TestDeviceNUMANodeChild", append(strings.Fields(tc.env), "OMPALLOC_CUDA_TEST_WANT="+tc.want)...)
		})
	}
}

func TestDeviceNUMANodeChild(t *testing.T) {
	inChild(t)
	sysRoot = numatest.PCIRoot(t, "../../numa/testdata/two-socket")
	p := newPlugin(defaultDriver)
	require.NoError(t, p.Init())
	var got []string
	for _, d := range p.devices {
		require.NoError(t, d.Open(), "the node is a hint: no answer fails nothing")
		got = append(got, strconv.Itoa(d.Info().NUMANode))
		require.NoError(t, d.Close())
	}
	require.Equal(t, os.Getenv("OMPALLOC_CUDA_TEST_WANT"), strings.Join(got, ","))

	// A driver without cuDeviceGetPCIBusId (it is optional): -1, no failure.
	p.drv.cuDeviceGetPCIBusId = 0
	d := discoverDevice(p.drv, 0, p.version)
	require.NoError(t, d.openErr)
	require.Equal(t, -1, d.Info().NUMANode)
}
