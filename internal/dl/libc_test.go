package dl

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

func TestLibCMapAligned(t *testing.T) {
	c, err := C()
	require.NoError(t, err)
	const align = 4 << 20
	p, err := c.MapAligned(1<<20, align)
	require.NoError(t, err)
	require.Zero(t, p%align, "mapping %#x not aligned to %d", p, align)
	b := cmem.Bytes(p, 1<<20)
	require.Equal(t, byte(0), b[12345], "fresh mapping reads as zero")
	b[0], b[len(b)-1] = 1, 2
	require.NoError(t, c.Mlock(p, 4096))
	require.NoError(t, c.Munlock(p, 4096))
	require.NoError(t, c.Unmap(p, 1<<20))
}

func TestLibCErrorsNameTheCall(t *testing.T) {
	c, err := C()
	require.NoError(t, err)
	err = c.Unmap(1, 4096) // unaligned address: EINVAL
	require.ErrorContains(t, err, "munmap")
}
