package target

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestArrayOnAGPU: host memory of a GPU is a []T through Host, device
// memory is refused with an error saying why, and Pointer gives the
// address either way.
func TestArrayOnAGPU(t *testing.T) {
	f, d := withFake(t, 0)
	host, err := AllocArray[float32](d, MemHost, 1024)
	require.NoError(t, err)
	xs, err := host.Host()
	require.NoError(t, err)
	require.Len(t, xs, 1024)
	require.Equal(t, 1024, cap(xs))
	xs[1023] = 2.5
	require.Equal(t, unsafe.Pointer(&xs[0]), host.Pointer())

	dev, err := AllocArray[byte](d, MemDevice, 4096)
	require.NoError(t, err)
	require.NotNil(t, dev.Pointer(), "the device's address, for its own code")
	_, err = dev.Host()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "the host cannot access it")

	_, err = hostSlice[[3]byte](host.m)
	require.ErrorIs(t, err, ErrInvalidArgument, "4096 is not a whole number of 3-byte elements")
	_, err = hostSlice[*int](host.m)
	require.ErrorContains(t, err, "Go pointers")
	_, err = AllocArray[*int](d, MemHost, 1)
	require.ErrorContains(t, err, "Go pointers")
	_, err = AllocArray[uint64](d, MemHost, int(^uint(0)>>1))
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "the size overflows")

	require.NoError(t, host.Free())
	require.NoError(t, dev.Free())
	require.Zero(t, f.live(MemHost))
	require.Zero(t, f.live(MemDevice))
	require.ErrorIs(t, dev.Free(), ErrInvalidArgument, "a second free is refused")
	require.ErrorIs(t, Array[byte]{}.Free(), ErrInvalidArgument)
	_, err = Array[byte]{}.Host()
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestArrayOnTheHost: the host device's device memory is host memory.
func TestArrayOnTheHost(t *testing.T) {
	d, err := Get(InitialDevice())
	require.NoError(t, err)
	require.True(t, d.IsHost())
	a, err := AllocArray[uint64](d, MemDevice, 1<<13)
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Free()) }()
	xs, err := a.Host()
	require.NoError(t, err)
	require.Len(t, xs, 1<<13)
	xs[0] = 7
}
