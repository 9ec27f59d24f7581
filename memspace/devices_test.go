package memspace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOnDevicesIdenticalRequestsShareAHandle(t *testing.T) {
	a, err := OnDevices(TargetDevice, []int{1, 0, 1}, false)
	require.NoError(t, err)
	b, err := OnDevices(TargetDevice, []int{0, 1}, false)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.True(t, a.runtimeRange())
	require.True(t, a.Exists())
	require.False(t, a.predefinedSpace(), "not a predefined memory space")

	c, err := OnDevices(TargetDevice, []int{0, 1}, true)
	require.NoError(t, err)
	require.NotEqual(t, a, c, "with the host it is another memory space")
	d, err := OnDevices(Default, []int{0, 1}, false)
	require.NoError(t, err)
	require.NotEqual(t, a, d)

	got, ok := DevicesOf(a)
	require.True(t, ok)
	require.Equal(t, Devices{Base: TargetDevice, Devices: []int{0, 1}}, got)
	got.Devices[0] = 9 // a copy
	again, _ := DevicesOf(a)
	require.Equal(t, 0, again.Devices[0])
}

func TestOnDevicesErrors(t *testing.T) {
	_, err := OnDevices(ID(77), []int{0}, false)
	require.ErrorContains(t, err, "not a predefined")
	_, err = OnDevices(Default, nil, false)
	require.ErrorContains(t, err, "at least one device")
	_, ok := DevicesOf(firstRuntime + 100000)
	require.False(t, ok)
	_, ok = DevicesOf(Default)
	require.False(t, ok)
}
