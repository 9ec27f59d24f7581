package kmp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 10, item 5: kmp names an allocator as alloc does ("allocator#1024"),
// never by a hexadecimal handle, and every warning has the one prefix.
func TestWarningsNameAllocatorsAsAllocDoes(t *testing.T) {
	h := InitAllocator(DefaultMemSpace, nil)
	require.NotEqual(t, NullAllocator, h)
	DestroyAllocator(h)
	for _, tc := range []struct {
		call func()
		says string
	}{
		{func() { DestroyAllocator(h) }, "omp_destroy_allocator: allocator#"},
		{func() { _ = Alloc(8, h) }, "omp_alloc: allocator#"},
		{func() { SetDefaultAllocator(h) }, "omp_set_default_allocator: allocator#"},
	} {
		out := captureWarnings(t, tc.call)
		require.Contains(t, out, tc.says)
		require.Regexp(t, `^ompalloc: warning: \S+: allocator#\d+ is not a live allocator`, out)
		require.NotContains(t, out, "0x")
	}
}
