package kmp

import (
	"os"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Issue 9, item 8: omp_target_memcpy from or to a pointer inside an
// allocator block (not at its start) is checked against that block too: a
// copy running past its end gives -1 and one warning instead of a fault or
// a corrupted neighbour; copies within the block work.
func TestTargetMemcpyInsideBlock(t *testing.T) {
	host := GetInitialDevice()
	blk := Alloc(64, DefaultMemAlloc)
	require.NotNil(t, blk)
	defer Free(blk, DefaultMemAlloc)
	big := Alloc(1<<20, DefaultMemAlloc)
	require.NotNil(t, big)
	defer Free(big, DefaultMemAlloc)
	// Unknown to the runtime and large enough for any length below, so
	// that only the checks against blk and big can refuse.
	other := pages(t, (1<<30)/os.Getpagesize())

	tests := []struct {
		name              string
		dst, src          unsafe.Pointer
		n, dstOff, srcOff uintptr
		ok                bool
	}{
		{"source inside, far past the end", other, add(blk, 8), 1 << 30, 0, 0, false},
		{"source inside, one past the end", other, add(blk, 8), 57, 0, 0, false},
		{"source inside plus offset, past", other, add(blk, 8), 8, 0, 50, false},
		{"source inside, to the end", other, add(blk, 8), 56, 0, 0, true},
		{"source last byte", other, add(blk, 63), 1, 0, 0, true},
		{"destination inside, one past the end", add(blk, 8), other, 57, 0, 0, false},
		{"destination inside, to the end", add(blk, 16), other, 48, 0, 0, true},
		{"large block inside, past", other, add(big, 4096), 1 << 20, 0, 0, false},
		{"large block inside, to the end", other, add(big, 4096), 1<<20 - 4096, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rc int
			w := targetWarnings(t, func() { rc = TargetMemcpy(tt.dst, tt.src, tt.n, tt.dstOff, tt.srcOff, host, host) })
			if tt.ok {
				require.Equal(t, 0, rc)
				require.Empty(t, w)
				return
			}
			require.Equal(t, -1, rc)
			require.Len(t, w, 1, "%q", w)
			require.Contains(t, w[0], "omp_target_memcpy")
			require.Contains(t, w[0], "out of bounds")
			require.Contains(t, w[0], "the allocator block of")
		})
	}
	// A copy within bounds moves the right bytes.
	for i := range 64 {
		*(*byte)(add(blk, uintptr(i))) = byte(i)
	}
	require.Equal(t, TargetMemcpy(other, add(blk, 8), 56, 0, 0, host, host), 0)
	for i := range 56 {
		require.Equal(t, byte(i+8), *(*byte)(add(other, uintptr(i))), "byte %d", i)
	}
}

// Issue 23, item 8: omp_target_memcpy (and its _rect and _async forms, omp_target_memset) on memory the runtime does not know
// cannot be bound-checked, and a copy running off the mapping (or at an
// offset far past it) ended in "fatal error: fault". It gives -1 and one
// warning now. In a child: before the fix it took the process down.
func TestTargetMemcpyForeignFaultIsAnError(t *testing.T) {
	out := runChild(t, "foreign-memcpy")
	require.Contains(t, out, "foreign copies refused: 7")
}

func foreignMemcpyChild(t *testing.T) {
	host := GetInitialDevice()
	pg := uintptr(os.Getpagesize())
	m := pages(t, 2)
	require.NoError(t, syscall.Mprotect(unsafe.Slice((*byte)(add(m, pg)), pg), syscall.PROT_NONE))
	other := pages(t, 2)
	refused := 0
	for _, tt := range []struct {
		name              string
		dst, src          unsafe.Pointer
		n, dstOff, srcOff uintptr
	}{
		{"source runs off its mapping", other, m, 2 * pg, 0, 0},
		{"source offset far past", other, m, 64, 0, 1 << 40},
		{"destination runs off its mapping", m, other, 2 * pg, 0, 0},
		{"destination offset into the hole", m, other, 64, pg, 0},
	} {
		var rc int
		w := targetWarnings(t, func() { rc = TargetMemcpy(tt.dst, tt.src, tt.n, tt.dstOff, tt.srcOff, host, host) })
		require.Equal(t, -1, rc, tt.name)
		require.Len(t, w, 1, "%s: %q", tt.name, w)
		require.Contains(t, w[0], "omp_target_memcpy")
		require.Contains(t, w[0], "bad address")
		refused++
	}
	// omp_target_memcpy_rect whose rows reach the page it may not touch:
	// its rows take the same checked host copy.
	var rc int
	w := targetWarnings(t, func() {
		rc = TargetMemcpyRect(other, m, 1, 2, []uintptr{2, 64}, []uintptr{0, 0}, []uintptr{0, 0},
			[]uintptr{2, pg}, []uintptr{2, pg}, host, host)
	})
	require.Equal(t, -1, rc, "rect")
	require.Len(t, w, 1, "rect: %q", w)
	require.Contains(t, w[0], "omp_target_memcpy_rect")
	require.Contains(t, w[0], "bad address")
	refused++
	// omp_target_memcpy_async: the task fails (-1, one warning).
	w = targetWarnings(t, func() { rc = TargetMemcpyAsync(other, m, 2*pg, 0, 0, host, host).Wait() })
	require.Equal(t, -1, rc, "async")
	require.Len(t, w, 1, "async: %q", w)
	require.Contains(t, w[0], "omp_target_memcpy_async")
	require.Contains(t, w[0], "bad address")
	refused++
	// omp_target_memset into the page it may not touch: nil and one warning.
	var got unsafe.Pointer
	w = targetWarnings(t, func() { got = TargetMemset(add(m, pg-8), 0, 64, host) })
	require.Nil(t, got)
	require.Len(t, w, 1, "%q", w)
	require.Contains(t, w[0], "omp_target_memset")
	require.Contains(t, w[0], "bad address")
	refused++
	// The process goes on: a good copy works.
	*(*byte)(m) = 42
	require.Equal(t, 0, TargetMemcpy(other, m, pg, 0, 0, host, host))
	require.Equal(t, byte(42), *(*byte)(other))
	os.Stdout.WriteString("foreign copies refused: " + itoa(uintptr(refused)) + "\n")
}
