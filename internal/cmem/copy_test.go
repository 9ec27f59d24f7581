package cmem

import (
	"os"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Issue 23, item 8: a copy running into a page it may not touch returns an error
// naming the address; without SetPanicOnFault it is "fatal error: fault".
func TestCopyCheckedSurvivesAFault(t *testing.T) {
	pg := os.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*pg, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	require.NoError(t, syscall.Mprotect(m[pg:], syscall.PROT_NONE)) // as good as unmapped for a copy
	base := uintptr(unsafe.Pointer(&m[0]))
	hole := base + uintptr(pg)
	dst := make([]byte, 2*pg)
	d := uintptr(unsafe.Pointer(&dst[0]))

	err = CopyChecked(d, base, uintptr(2*pg)) // reads into the hole
	require.ErrorIs(t, err, ErrFault)
	require.ErrorContains(t, err, "bad address at")

	err = CopyChecked(hole, d, 16) // writes into it
	require.ErrorIs(t, err, ErrFault)

	err = FillChecked(hole-8, 16, 0xff) // the first 8 bytes land, then the fault
	require.ErrorIs(t, err, ErrFault)
	require.Equal(t, byte(0xff), m[pg-1])

	m[0], m[pg-1] = 7, 9
	require.NoError(t, CopyChecked(d, base, uintptr(pg)))
	require.Equal(t, byte(7), dst[0])
	require.Equal(t, byte(9), dst[pg-1])

	// The goroutine's setting is restored: a later fault would be fatal again.
	require.False(t, debugPanicOnFault())
}
