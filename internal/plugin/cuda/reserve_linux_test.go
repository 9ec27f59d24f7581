package cuda

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
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

// readWrite makes [p, p+n) of a reservation readable and writable.
func readWrite(t *testing.T, p, n uintptr) {
	t.Helper()
	require.NoError(t, syscall.Mprotect(cmem.Bytes(p, n), syscall.PROT_READ|syscall.PROT_WRITE))
}
