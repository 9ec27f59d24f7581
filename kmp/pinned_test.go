package kmp

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/target"
)

// Issue 9, item 1: llvm_omp_target_unlock_mem of a pinned block the caller
// never locked is one warning naming what holds the memory; VmLck, the
// registry and the pinned heap's statistics do not move, and later pinned
// blocks are locked.
func TestUnlockOfPinnedBlockWarnsAndChangesNothing(t *testing.T) {
	alloc.Trim()
	// The pinned allocator pins for the default device: the host without a
	// GPU, the GPU's driver with one. The user unlocks on that device.
	dev := target.DefaultDevice()
	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPinned, AtvTrue}, {AtkFallback, AtvNullFb}})
	require.NotEqual(t, NullAllocator, a)
	defer func() { DestroyAllocator(a); alloc.Trim() }()
	p := Alloc(64, a)
	require.NotNil(t, p)
	defer Free(p, a)
	d, err := target.Get(dev)
	require.NoError(t, err)
	vm, entries, pinnedBytes := vmLckKB(t), d.Registry().Stats().Entries, alloc.ReadPinnedStats().Bytes

	w := targetWarnings(t, func() { TargetUnlockMem(p, dev) })
	require.Len(t, w, 1, "%q", w)
	require.Contains(t, w[0], "llvm_omp_target_unlock_mem")
	require.Contains(t, w[0], "held by the pinned heap of device")
	require.Equal(t, vm, vmLckKB(t), "VmLck unchanged")
	require.Equal(t, entries, d.Registry().Stats().Entries)
	require.Equal(t, pinnedBytes, alloc.ReadPinnedStats().Bytes)
	require.True(t, registered(d.Registry(), uintptr(p)))

	q := Alloc(64, a)
	require.NotNil(t, q)
	require.True(t, registered(d.Registry(), uintptr(q)), "later blocks are locked")
	Free(q, a)
}

// Issue 9, item 6: a pinned allocator with OpenMP's default_mem_fb keeps
// serving unpinned memory when pinning fails, and says so once.
func TestPinFallbackWarnsOnce(t *testing.T) {
	alloc.Trim()
	old := alloc.SetPinnedLimit(1) // every new chunk is refused
	defer alloc.SetPinnedLimit(old)
	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPinned, AtvTrue}})
	require.NotEqual(t, NullAllocator, a)
	defer DestroyAllocator(a)
	var ps []unsafe.Pointer
	w := captureWarnings(t, func() {
		for i := 0; i < 3; i++ {
			p := Alloc(64, a)
			require.NotNil(t, p, "default_mem_fb serves")
			ps = append(ps, p)
		}
	})
	for _, p := range ps {
		Free(p, a)
	}
	require.Equal(t, 1, strings.Count(w, "\n"), "%q", w)
	require.Contains(t, w, "cannot pin memory")
	require.Contains(t, w, "pinned-memory limit")
	require.Contains(t, w, "omp_default_mem_alloc, unpinned")

	// Another allocator warns for itself.
	b := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPinned, AtvTrue}})
	defer DestroyAllocator(b)
	w = captureWarnings(t, func() { Free(Alloc(64, b), b) })
	require.Equal(t, 1, strings.Count(w, "\n"), "%q", w)
}

// Issue 9, item 8: omp_target_memcpy checks offset plus length against the
// memory the runtime knows (allocator blocks, omp_target_alloc blocks,
// locked ranges) and gives -1 and one warning instead of a fault.
func TestTargetMemcpyBounds(t *testing.T) {
	host := GetInitialDevice()
	tgt := TargetAlloc(4096, host)
	require.NotNil(t, tgt)
	defer TargetFree(tgt, host)
	blk := Alloc(256, DefaultMemAlloc)
	require.NotNil(t, blk)
	defer Free(blk, DefaultMemAlloc)
	locked := pages(t, 2)
	require.NotNil(t, TargetLockMem(locked, 4096, host))
	defer TargetUnlockMem(locked, host)

	tests := []struct {
		name              string
		dst, src          unsafe.Pointer
		n, dstOff, srcOff uintptr
		ok                bool
		want              string
	}{
		{"target block, far offset", tgt, blk, 16, 1 << 30, 0, false, "omp_target_alloc block of 4096 bytes"},
		{"target block, last bytes", tgt, blk, 16, 4096 - 16, 0, true, ""},
		{"target block, one past", tgt, blk, 16, 4096 - 15, 0, false, "destination"},
		{"allocator block as source", tgt, blk, 257, 0, 0, false, "allocator block of 256 bytes"},
		{"allocator block, offset", tgt, blk, 16, 0, 250, false, "source"},
		{"allocator block, whole", tgt, blk, 256, 0, 0, true, ""},
		{"locked range", locked, tgt, 64, 4096 - 32, 0, false, "locked range of 4096 bytes"},
		{"locked range, inside", locked, tgt, 64, 4096 - 64, 0, true, ""},
		{"huge length", tgt, blk, 1 << 40, 0, 0, false, "out of bounds"},
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
			require.Contains(t, w[0], tt.want)
		})
	}
}
