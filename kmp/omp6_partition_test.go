package kmp

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestMempartitioner: a C-style partitioner cuts each allocation into
// pages round-robin over the resources; blocks work, the user data comes
// back at release, and bad calls warn.
func TestMempartitioner(t *testing.T) {
	var released []uintptr
	h := InitMempartitioner(DynamicMempartition, func(p *Mempartition) {
		n := int((p.Size() + 4095) / 4096)
		if InitMempartition(p, n, p.Size()^0xabc) != 0 {
			return
		}
		left := p.Size()
		for i := range n {
			sz := min(left, 4096)
			MempartitionSetPart(p, i, i%p.NumResources(), sz)
			left -= sz
		}
	}, func(p *Mempartition) { released = append(released, MempartitionGetUserData(p)) })
	require.NotZero(t, h)
	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPartition, AtvPartitioner}, {AtkPartitioner, uintptr(h)}, {AtkFallback, AtvNullFb}})
	require.NotEqual(t, NullAllocator, a)
	p := Alloc(10000, a)
	require.NotNil(t, p)
	unsafe.Slice((*byte)(p), 10000)[9999] = 1
	Free(p, NullAllocator)
	require.Equal(t, []uintptr{10000 ^ 0xabc}, released)

	w := captureWarnings(t, func() { DestroyMempartitioner(h) })
	require.Contains(t, w, "used by 1 live allocators")
	DestroyAllocator(a)
	w = captureWarnings(t, func() { DestroyMempartitioner(h) })
	require.Empty(t, w)
	w = captureWarnings(t, func() { DestroyMempartitioner(h) })
	require.Contains(t, w, "not a live partitioner")

	w = captureWarnings(t, func() {
		require.Zero(t, InitMempartitioner(7, func(*Mempartition) {}, nil))
		require.Equal(t, -1, InitMempartition(nil, 1, 0))
		require.Equal(t, -1, MempartitionSetPart(&Mempartition{}, 0, 0, 1))
		require.Zero(t, MempartitionGetUserData(nil))
		require.Equal(t, NullAllocator, InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPartition, AtvPartitioner}}))
	})
	require.Contains(t, w, "omp_init_mempartitioner: ")
	require.Contains(t, w, "before omp_init_mempartition")
	require.Contains(t, w, "needs an omp_atk_partitioner trait")
}
