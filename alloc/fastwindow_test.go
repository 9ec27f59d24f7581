//go:build ompalloc_testhooks

package alloc

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/memspace"
)

// Issue 30: Destroy waits out the hot path's pinned section. An allocation
// held (by heap.FastWindowHook, spinning) between its check of the
// destroyed flag and its count: Destroy must not read the live count until
// it ends, so it reports the block live (ErrLiveBlocks) and keeps the
// handle; without the grace period (pcpu.Quiesce) it returned nil while
// the block was still being counted, and released the number under it.
// Run with: go test -tags ompalloc_testhooks -run TestDestroyWaitsForFastAlloc ./alloc/
func TestDestroyWaitsForFastAlloc(t *testing.T) {
	a, err := New(memspace.Default)
	require.NoError(t, err)
	warm, err := a.Alloc(64) // the P's cache then holds 64 B slots
	require.NoError(t, err)
	require.NoError(t, Free(warm))

	var inWindow, destroyed atomic.Bool
	heap.FastWindowHook = func() {
		if inWindow.Swap(true) {
			return // only the first allocation waits
		}
		for deadline := time.Now().Add(300 * time.Millisecond); !destroyed.Load() && time.Now().Before(deadline); {
		}
	}
	t.Cleanup(func() { heap.FastWindowHook = nil })
	got := make(chan error, 1)
	var p atomic.Pointer[byte]
	go func() {
		q, err := a.Alloc(64)
		p.Store((*byte)(q))
		got <- err
	}()
	for !inWindow.Load() {
		time.Sleep(time.Millisecond)
	}
	derr := a.Destroy()
	destroyed.Store(true)
	require.NoError(t, <-got, "the allocation passed the flag's check before Destroy set it")
	heap.FastWindowHook = nil
	require.ErrorIs(t, derr, ErrLiveBlocks, "Destroy read the live count while the allocation was still counting its block")
	require.NoError(t, Free(unsafe.Pointer(p.Load())))
	require.Nil(t, owner(a.id), "the last free released the destroyed allocator")
}
