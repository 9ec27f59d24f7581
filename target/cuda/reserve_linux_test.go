package cuda

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// reserve maps n bytes of address space that cannot be accessed (and costs
// no memory), released at the end of the test.
func reserve(t *testing.T, n uintptr) uintptr {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	require.NoError(t, err, "reserving %d bytes of address space", n)
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
