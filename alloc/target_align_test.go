package alloc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 23, item 9: an allocator on a target memory space honours its
// alignment trait whatever address the device returns (here the host
// device, whose blocks are page-aligned: 64 KiB alignment failed for about
// 15 blocks in 16, "not supported: device 0 returned 0x…, not aligned to
// 65536"), and no failure path drives PoolUsed below zero (each refusal
// released a pool reservation never made: -122,325 after a 5 s hammer).
func TestTargetMemspaceAlignment(t *testing.T) {
	for _, ms := range []memspace.ID{memspace.TargetHost, memspace.TargetShared, memspace.TargetDevice} {
		for _, pool := range []uintptr{0, 64 << 20} {
			for _, align := range []uintptr{8 << 10, 64 << 10, 2 << 20} {
				name := ms.String() + "/pool=" + itoa(pool) + "/align=" + itoa(align)
				t.Run(name, func(t *testing.T) {
					opts := []Option{WithAlignment(align), WithFallback(traits.NullFb)}
					if pool > 0 {
						opts = append(opts, WithPoolSize(pool))
					}
					a := mustNew(t, ms, opts...)
					var ps []unsafe.Pointer
					for i := range 16 {
						size := uintptr(1000 + i*4096)
						p, err := a.Alloc(size)
						require.GreaterOrEqual(t, a.Stats().PoolUsed, int64(0), "after block %d (%v)", i, err)
						require.NoError(t, err, "block %d", i)
						require.Zero(t, uintptr(p)%align, "block %d at %p", i, p)
						fill(p, size, byte(i)) // all of it is ours (a device block is host memory on the host device)
						info, err := Inspect(p)
						require.NoError(t, err)
						require.Equal(t, size, info.Size)
						ps = append(ps, p)
					}
					if pool > 0 {
						require.Positive(t, a.Stats().PoolUsed)
						require.LessOrEqual(t, a.Stats().PoolUsed, int64(pool))
					}
					for _, p := range ps {
						require.NoError(t, Free(p))
					}
					require.Zero(t, a.Stats().PoolUsed, "every charge is given back")
					require.Zero(t, a.Stats().BlocksLive)
				})
			}
		}
	}
}

// A pool too small for the alignment slack refuses the block and gives
// back what it reserved, nothing more.
func TestTargetMemspaceAlignmentPoolRefusal(t *testing.T) {
	a := mustNew(t, memspace.TargetHost, WithAlignment(2<<20), WithPoolSize(1<<20), WithFallback(traits.NullFb))
	for range 8 {
		p, err := a.Alloc(4096)
		if err != nil {
			require.ErrorIs(t, err, ErrPoolExhausted)
		} else {
			require.Zero(t, uintptr(p)%(2<<20))
			require.NoError(t, Free(p))
		}
		require.Zero(t, a.Stats().PoolUsed)
	}
}

func itoa(v uintptr) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; v > 0; v /= 10 {
		i--
		b[i] = byte('0' + v%10)
	}
	return string(b[i:])
}
