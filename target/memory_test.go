package target

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryOnAGPU(t *testing.T) {
	f, d := withFake(t, 0)
	host, err := d.AllocMemory(MemHost, 4096)
	require.NoError(t, err)
	require.True(t, host.HostAccessible())
	xs, err := Slice[float32](host)
	require.NoError(t, err)
	require.Len(t, xs, 1024)
	require.Equal(t, 1024, cap(xs))
	xs[1023] = 2.5
	b, err := host.Bytes()
	require.NoError(t, err)
	require.Len(t, b, 4096)
	require.Equal(t, host.Addr, uintptr(host.Pointer()))

	dev, err := d.AllocMemory(MemDevice, 4096)
	require.NoError(t, err)
	require.False(t, dev.HostAccessible())
	_, err = dev.Bytes()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "the host cannot access it")

	_, err = Slice[[3]byte](host)
	require.ErrorIs(t, err, ErrInvalidArgument, "4096 is not a whole number of 3-byte elements")
	_, err = Slice[*int](host)
	require.ErrorContains(t, err, "Go pointers")

	require.NoError(t, host.Free())
	require.NoError(t, dev.Free())
	require.Zero(t, f.live(MemHost))
	require.Zero(t, f.live(MemDevice))
	require.ErrorIs(t, dev.Free(), ErrInvalidArgument, "a second free is refused")
	require.ErrorIs(t, Memory{}.Free(), ErrInvalidArgument)
	_, err = Memory{}.Bytes()
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestMemoryOnTheHost(t *testing.T) {
	d, err := Get(InitialDevice())
	require.NoError(t, err)
	require.True(t, d.IsHost())
	m, err := d.AllocMemory(MemDevice, 1<<16)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Free()) }()
	require.True(t, m.HostAccessible(), "the host device's device memory is host memory")
	xs, err := Slice[uint64](m)
	require.NoError(t, err)
	require.Len(t, xs, 1<<13)
	xs[0] = 7
}
