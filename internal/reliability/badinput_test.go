package reliability

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// sentinel is a block that every bad-input case must leave alone.
type sentinel struct {
	a    *alloc.Allocator
	p    unsafe.Pointer
	size uintptr
	seed byte
}

// world is what the bad-input cases run against: sentinel blocks of every
// kind (small, medium, huge, pinned, pooled), a sentinel lock with two
// references on the host device, and the counts they must leave unchanged.
type world struct {
	align64, pinned, pooled, nullFb *alloc.Allocator
	blocks                          []sentinel
	host                            *target.Device
	pinDev                          *target.Device // the device the pinned allocator pins for (the default device)
	lockBuf                         uintptr
	regLen                          int
	live                            int64
	pinnedUsed                      uintptr
	poolUsed                        int64
	vmLck                           int
}

const sentinelLock = 64 << 10

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	var err error
	w.align64, err = alloc.New(memspace.Default, alloc.WithAlignment(64))
	require.NoError(t, err)
	w.pinned, err = alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	w.pooled, err = alloc.New(memspace.Default, alloc.WithPoolSize(1<<20), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	w.nullFb, err = alloc.New(memspace.Default, alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	for i, s := range []struct {
		a    *alloc.Allocator
		size uintptr
	}{{alloc.Default(), 100}, {w.align64, 200 << 10}, {w.pinned, 1000}, {alloc.Default(), 5 << 20}, {w.pooled, 4000}, {w.nullFb, 40000}} {
		p, err := s.a.Alloc(s.size)
		require.NoError(t, err)
		pattern(bytesAt(p, s.size), byte(i+1))
		w.blocks = append(w.blocks, sentinel{a: s.a, p: p, size: s.size, seed: byte(i + 1)})
	}
	w.host, err = target.Get(target.InitialDevice())
	require.NoError(t, err)
	// With a GPU the default device is the GPU, whose registry holds the
	// pinned allocator's chunks (issue 27 item 13: not the host's).
	w.pinDev, err = target.Get(target.DefaultDevice())
	require.NoError(t, err)
	w.lockBuf = hostBuf(t, sentinelLock)
	for range 2 {
		_, err := w.host.LockMem(w.lockBuf, sentinelLock)
		require.NoError(t, err)
	}
	alloc.Trim()
	w.regLen = w.host.Registry().Stats().Entries
	for _, l := range alloc.LiveBlocks() {
		w.live += l.Blocks
	}
	w.pinnedUsed = alloc.ReadPinnedStats().Used
	w.poolUsed = w.pooled.Stats().PoolUsed
	w.vmLck = vmLck()
	return w
}

// intact checks every sentinel block, the sentinel lock, and the counts.
func (w *world) intact(t *testing.T) {
	t.Helper()
	for i, s := range w.blocks {
		require.True(t, holds(bytesAt(s.p, s.size), s.seed), "sentinel block %d was changed", i)
		n, err := allocBlockSize(s.p)
		require.NoError(t, err, "sentinel block %d", i)
		require.Equal(t, s.size, n)
		o, err := allocOwner(s.p)
		require.NoError(t, err)
		require.Same(t, s.a, o)
	}
	e, ok := w.host.Registry().Entry(w.lockBuf)
	require.True(t, ok, "the sentinel lock is still there")
	require.Equal(t, 2, e.Refs, "the sentinel lock still has its two references")
	require.Equal(t, uintptr(sentinelLock), e.Size)
	require.True(t, registered(w.pinDev.Registry(), uintptr(w.blocks[2].p)), "the pinned sentinel is still pinned")
	alloc.Trim()
	require.Equal(t, w.regLen, w.host.Registry().Stats().Entries, "registry entries")
	var live int64
	for _, l := range alloc.LiveBlocks() {
		live += l.Blocks
	}
	require.Equal(t, w.live, live, "live blocks: %v", alloc.LiveBlocks())
	used := alloc.ReadPinnedStats().Used
	require.Equal(t, w.pinnedUsed, used, "pinned bytes")
	require.Equal(t, w.poolUsed, w.pooled.Stats().PoolUsed, "pool accounting")
	require.Equal(t, w.vmLck, vmLck(), "VmLck")
}

func (w *world) close(t *testing.T) {
	t.Helper()
	for _, s := range w.blocks {
		require.NoError(t, alloc.Free(s.p))
	}
	for range 2 {
		require.NoError(t, w.host.UnlockMem(w.lockBuf))
	}
	for _, a := range []*alloc.Allocator{w.align64, w.pinned, w.pooled, w.nullFb} {
		require.NoError(t, a.Destroy())
	}
}

// badCase is one bad input: run calls the API and checks its answer.
type badCase struct {
	name string
	run  func(t *testing.T, w *world)
}

// warnings counts the warning lines f printed.
func warnings(t *testing.T, f func()) (int, string) {
	out := captureStderr(t, f)
	return strings.Count(out, "ompalloc: warning:"), out
}

// warnsOnce checks that f printed exactly one warning line that mentions
// each of want.
func warnsOnce(t *testing.T, f func(), want ...string) {
	t.Helper()
	n, out := warnings(t, f)
	require.Equal(t, 1, n, "want exactly one warning, got:\n%s", out)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line:\n%s", out)
	for _, s := range want {
		require.Contains(t, out, s)
	}
}

func silent(t *testing.T, f func()) {
	t.Helper()
	n, out := warnings(t, f)
	require.Zero(t, n, "no warning expected:\n%s", out)
}

func isErr(targets ...error) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		for _, e := range targets {
			require.ErrorIs(t, err, e)
		}
	}
}

var goVar [64]byte // a Go pointer the runtime never returned

// goPtr returns a pointer into Go memory, foreign to the runtime.
func goPtr() unsafe.Pointer { return unsafe.Pointer(&goVar[16]) }

// freshFreed returns a pointer to a block of size bytes just freed.
func freshFreed(t *testing.T, a *alloc.Allocator, size uintptr) unsafe.Pointer {
	p, err := a.Alloc(size)
	require.NoError(t, err)
	require.NoError(t, alloc.Free(p))
	return p
}

func goAPICases() []badCase {
	var cs []badCase
	add := func(name string, run func(t *testing.T, w *world)) { cs = append(cs, badCase{"go/" + name, run}) }

	// Pointers.
	add("Free(nil) is a no-op", func(t *testing.T, w *world) { require.NoError(t, alloc.Free(nil)) })
	add("Free(Go pointer)", func(t *testing.T, w *world) { isErr(alloc.ErrInvalidPointer)(t, alloc.Free(goPtr())) })
	add("Free(foreign C memory)", func(t *testing.T, w *world) {
		isErr(alloc.ErrInvalidPointer)(t, alloc.Free(cmem.Ptr(hostBuf(t, 4096))))
	})
	add("Free(address 1)", func(t *testing.T, w *world) {
		isErr(alloc.ErrInvalidPointer)(t, alloc.Free(cmem.Ptr(1)))
	})
	add("Free(top of the address space)", func(t *testing.T, w *world) {
		isErr(alloc.ErrInvalidPointer)(t, alloc.Free(cmem.Ptr(math.MaxUint64&^15)))
	})
	for i, off := range []uintptr{16, 8, 1} {
		add(fmt.Sprintf("Free(interior pointer +%d of a sentinel %d)", off, i), func(t *testing.T, w *world) {
			s := w.blocks[[]int{0, 1, 3}[i]]
			isErr(alloc.ErrInvalidPointer)(t, alloc.Free(unsafe.Add(s.p, off)))
		})
	}
	for _, off := range []int{1, 4, 17, 24, 99} {
		add(fmt.Sprintf("Free and Realloc of an unaligned interior pointer +%d of a small block", off), func(t *testing.T, w *world) {
			q := unsafe.Add(w.blocks[0].p, off) // 100 bytes: a slot with a header
			isErr(alloc.ErrInvalidPointer)(t, alloc.Free(q))
			p, err := ompglue.Realloc(q, 10)
			require.Nil(t, p)
			isErr(alloc.ErrInvalidPointer)(t, err)
		})
	}
	for _, size := range []uintptr{48, 1 << 20, 8 << 20} {
		add(fmt.Sprintf("double free of a %d-byte block", size), func(t *testing.T, w *world) {
			p := freshFreed(t, w.nullFb, size)
			err := alloc.Free(p)
			require.Error(t, err)
			require.True(t, errors.Is(err, alloc.ErrDoubleFree) || errors.Is(err, alloc.ErrInvalidPointer), "%v", err)
		})
	}
	add("free through the wrong allocator still frees the block right", func(t *testing.T, w *world) {
		p, err := w.pooled.Alloc(3000)
		require.NoError(t, err)
		require.Greater(t, w.pooled.Stats().PoolUsed, w.poolUsed)
		require.NoError(t, w.align64.Free(p))
		require.Equal(t, w.poolUsed, w.pooled.Stats().PoolUsed, "the pooled allocator got its quota back")
	})
	add("free of a pinned block through the default allocator unpins it", func(t *testing.T, w *world) {
		p, err := w.pinned.Alloc(1 << 20)
		require.NoError(t, err)
		require.True(t, registered(w.pinDev.Registry(), uintptr(p)))
		require.NoError(t, alloc.Default().Free(p))
	})
	add("BlockSize and Owner of a foreign pointer", func(t *testing.T, w *world) {
		_, err := allocBlockSize(goPtr())
		require.Error(t, err)
		_, err = allocOwner(goPtr())
		require.Error(t, err)
	})

	// Sizes.
	add("Alloc(0)", func(t *testing.T, w *world) {
		p, err := w.nullFb.Alloc(0)
		require.Nil(t, p)
		require.NoError(t, err)
	})
	for _, size := range []uintptr{1 << 62, math.MaxUint64, math.MaxUint64 - 15, 1<<46 + 1} {
		for _, which := range []string{"null_fb", "default_mem_fb", "pinned", "pooled"} {
			add(fmt.Sprintf("Alloc(%#x) on %s", size, which), func(t *testing.T, w *world) {
				a := map[string]*alloc.Allocator{"null_fb": w.nullFb, "default_mem_fb": w.align64, "pinned": w.pinned, "pooled": w.pooled}[which]
				p, err := a.Alloc(size)
				require.Nil(t, p)
				if which == "pooled" && size <= 1<<62 {
					isErr(alloc.ErrPoolExhausted)(t, err)
				} else if which == "pooled" {
					// The footprint of a size this close to 2^64 wraps: the
					// heap's own size check refuses it.
					require.True(t, errors.Is(err, alloc.ErrPoolExhausted) || errors.Is(err, heap.ErrTooLarge), "%v", err)
				} else {
					isErr(heap.ErrTooLarge)(t, err)
				}
			})
		}
	}
	for _, c := range []struct{ n, size uintptr }{{1<<32 + 1, 1 << 32}, {math.MaxUint64, 2}, {2, math.MaxUint64}, {1 << 63, 1 << 1}} {
		add(fmt.Sprintf("Calloc(%#x, %#x) overflows", c.n, c.size), func(t *testing.T, w *world) {
			p, err := w.nullFb.Calloc(c.n, c.size)
			require.Nil(t, p)
			isErr(alloc.ErrOverflow)(t, err)
		})
		add(fmt.Sprintf("AlignedCalloc(64, %#x, %#x) overflows", c.n, c.size), func(t *testing.T, w *world) {
			p, err := w.nullFb.AlignedCalloc(64, c.n, c.size)
			require.Nil(t, p)
			isErr(alloc.ErrOverflow)(t, err)
		})
	}
	add("Calloc with a zero count or size", func(t *testing.T, w *world) {
		for _, c := range [][2]uintptr{{0, 10}, {10, 0}, {0, 0}} {
			p, err := w.nullFb.Calloc(c[0], c[1])
			require.Nil(t, p)
			require.NoError(t, err)
		}
	})
	add("Calloc near the limit", func(t *testing.T, w *world) {
		p, err := w.nullFb.Calloc(1<<31, 1<<31)
		require.Nil(t, p)
		isErr(heap.ErrTooLarge)(t, err)
	})

	// Alignment.
	for _, al := range []uintptr{0, 3, 24, 1<<20 + 1, math.MaxUint64} {
		add(fmt.Sprintf("AlignedAlloc(%#x) is not a power of two", al), func(t *testing.T, w *world) {
			p, err := w.nullFb.AlignedAlloc(al, 64)
			require.Nil(t, p)
			isErr(alloc.ErrInvalidArgument)(t, err)
		})
	}
	add("AlignedCalloc(3)", func(t *testing.T, w *world) {
		p, err := w.nullFb.AlignedCalloc(3, 1, 8)
		require.Nil(t, p)
		isErr(alloc.ErrInvalidArgument)(t, err)
	})
	for _, al := range []uintptr{1 << 50, 1 << 63} {
		add(fmt.Sprintf("AlignedAlloc(%#x) is too large", al), func(t *testing.T, w *world) {
			p, err := w.nullFb.AlignedAlloc(al, 64)
			require.Nil(t, p)
			isErr(heap.ErrTooLarge)(t, err)
		})
	}

	// Realloc.
	add("Realloc(Go pointer)", func(t *testing.T, w *world) {
		p, err := ompglue.Realloc(goPtr(), 10)
		require.Nil(t, p)
		isErr(alloc.ErrInvalidPointer)(t, err)
	})
	add("Realloc(freed block)", func(t *testing.T, w *world) {
		p, err := ompglue.Realloc(freshFreed(t, w.nullFb, 64), 10)
		require.Nil(t, p)
		require.Error(t, err)
	})
	add("Realloc(interior pointer)", func(t *testing.T, w *world) {
		p, err := ompglue.Realloc(unsafe.Add(w.blocks[0].p, 16), 10)
		require.Nil(t, p)
		isErr(alloc.ErrInvalidPointer)(t, err)
	})
	add("Realloc to a huge size keeps the old block", func(t *testing.T, w *world) {
		p, err := w.nullFb.Alloc(100)
		require.NoError(t, err)
		pattern(bytesAt(p, 100), 99)
		q, err := w.nullFb.Realloc(p, 1<<62)
		require.Nil(t, q)
		require.Error(t, err)
		require.True(t, holds(bytesAt(p, 100), 99))
		require.NoError(t, alloc.Free(p))
	})
	add("Realloc into a full pool keeps the old block", func(t *testing.T, w *world) {
		p, err := w.nullFb.Alloc(100)
		require.NoError(t, err)
		q, err := w.pooled.Realloc(p, 2<<20)
		require.Nil(t, q)
		isErr(alloc.ErrPoolExhausted)(t, err)
		require.NoError(t, alloc.Free(p))
	})
	add("Realloc(nil, 0)", func(t *testing.T, w *world) {
		p, err := ompglue.Realloc(nil, 0)
		require.Nil(t, p)
		require.NoError(t, err)
	})

	// Typed slices.
	add("Make of a negative length", func(t *testing.T, w *world) {
		_, err := alloc.Make[int](w.nullFb, -1)
		isErr(alloc.ErrInvalidArgument)(t, err)
	})
	add("Make of a type with Go pointers", func(t *testing.T, w *world) {
		_, err := alloc.Make[*int](w.nullFb, 4)
		isErr(alloc.ErrInvalidArgument)(t, err)
		_, err = alloc.Make[struct{ s string }](w.nullFb, 4)
		isErr(alloc.ErrInvalidArgument)(t, err)
	})
	add("Make of a length whose bytes overflow", func(t *testing.T, w *world) {
		_, err := alloc.Make[[1 << 20]byte](w.nullFb, 1<<44)
		isErr(alloc.ErrOverflow)(t, err)
		_, err = alloc.Make[[1 << 20]byte](w.nullFb, 1<<42)
		isErr(heap.ErrTooLarge)(t, err)
	})

	// Traits.
	badTraits := []struct {
		key traits.Key
		v   uintptr
	}{
		{traits.SyncHint, 99}, {traits.Alignment, 3}, {traits.Alignment, 0}, {traits.Access, 99},
		{traits.PoolSize, 0}, {traits.Fallback, 99}, {traits.Pinned, 2}, {traits.Partition, 99},
		{traits.PinDevice, 1 << 40}, {traits.PreferredDevice, 1 << 40}, {traits.DeviceAccess, 99},
		{traits.TargetAccess, 99}, {traits.AtomicScope, 99}, {traits.PartSize, 0},
		{traits.Partitioner, 0}, {traits.Partition, traits.PartitionerValue},
		{traits.Key(0), 1}, {traits.Key(17), 1}, {traits.Key(99), 1}, {traits.Key(math.MaxUint64), 1},
		{traits.Key(99), traits.Default},
	}
	for _, bt := range badTraits {
		add(fmt.Sprintf("trait %v=%#x", bt.key, bt.v), func(t *testing.T, w *world) {
			a, err := alloc.NewFromTraits(memspace.Default, []traits.Trait{{Key: bt.key, Value: bt.v}})
			require.Nil(t, a)
			isErr(alloc.ErrInvalidTrait)(t, err)
			require.ErrorContains(t, err, bt.key.String())
		})
	}
	add("allocator_fb without fb_data", func(t *testing.T, w *world) {
		_, err := alloc.NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}})
		isErr(alloc.ErrInvalidTrait)(t, err)
	})
	add("fb_data naming no allocator", func(t *testing.T, w *world) {
		_, err := alloc.NewFromTraits(memspace.Default, []traits.Trait{
			{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 12345}})
		isErr(alloc.ErrInvalidTrait)(t, err)
	})
	add("fb_data naming a destroyed allocator", func(t *testing.T, w *world) {
		a, err := alloc.New(memspace.Default)
		require.NoError(t, err)
		require.NoError(t, a.Destroy())
		_, err = alloc.New(memspace.Default, alloc.WithFallbackAllocator(a))
		isErr(alloc.ErrInvalidTrait)(t, err)
	})
	add("pin_device that does not exist", func(t *testing.T, w *world) {
		_, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(1<<20))
		isErr(alloc.ErrInvalidTrait)(t, err)
	})
	for _, ms := range []memspace.ID{memspace.Null, memspace.ID(5), memspace.ID(12345), memspace.ID(math.MaxUint64)} {
		add(fmt.Sprintf("memory space %d", uintptr(ms)), func(t *testing.T, w *world) {
			var a *alloc.Allocator
			var err error
			require.NotPanics(t, func() { a, err = alloc.New(ms) })
			require.Nil(t, a)
			isErr(alloc.ErrInvalidArgument)(t, err)
		})
	}
	add("Destroy of a predefined allocator", func(t *testing.T, w *world) {
		isErr(alloc.ErrInvalidArgument)(t, alloc.Default().Destroy())
	})
	add("Destroy twice, Alloc after Destroy", func(t *testing.T, w *world) {
		a, err := alloc.New(memspace.Default)
		require.NoError(t, err)
		require.NoError(t, a.Destroy())
		isErr(alloc.ErrDestroyed)(t, a.Destroy())
		p, err := a.Alloc(10)
		require.Nil(t, p)
		isErr(alloc.ErrDestroyed)(t, err)
	})
	add("Lookup of an unknown handle", func(t *testing.T, w *world) {
		for _, h := range []uintptr{9, 99, 103, 12345, math.MaxUint64} {
			_, ok := ompglue.Lookup(h)
			require.False(t, ok, "handle %d", h)
		}
	})

	// Devices.
	for _, dev := range []int{-1, math.MinInt, 1 << 20, math.MaxInt} {
		add(fmt.Sprintf("device %d", dev), func(t *testing.T, w *world) {
			_, err := target.Get(dev)
			isErr(target.ErrBadDevice)(t, err)
			def := target.DefaultDevice()
			isErr(target.ErrBadDevice)(t, target.SetDefaultDevice(dev))
			require.Equal(t, def, target.DefaultDevice())
			isErr(target.ErrBadDevice)(t, target.Memcpy(w.lockBuf, w.lockBuf+8, 8, dev, target.InitialDevice()))
			isErr(target.ErrBadDevice)(t, target.Memcpy(w.lockBuf, w.lockBuf+8, 8, target.InitialDevice(), dev))
		})
	}
	add("Memcpy with a nil pointer", func(t *testing.T, w *world) {
		h := target.InitialDevice()
		isErr(target.ErrInvalidArgument)(t, target.Memcpy(0, w.lockBuf, 8, h, h))
		isErr(target.ErrInvalidArgument)(t, target.Memcpy(w.lockBuf, 0, 8, h, h))
	})

	// Locks.
	add("LockMem of nil, of zero bytes, wrapping around", func(t *testing.T, w *world) {
		_, err := w.host.LockMem(0, 10)
		isErr(target.ErrInvalidArgument)(t, err)
		_, err = w.host.LockMem(w.lockBuf, 0)
		isErr(target.ErrInvalidArgument)(t, err)
		_, err = w.host.LockMem(w.lockBuf, math.MaxUint64)
		require.Error(t, err)
	})
	add("UnlockMem of what was never locked", func(t *testing.T, w *world) {
		isErr(target.ErrNotLocked)(t, w.host.UnlockMem(hostBuf(t, 4096)))
		isErr(target.ErrNotLocked)(t, w.host.UnlockMem(w.lockBuf+sentinelLock))
		require.Error(t, w.host.UnlockMem(0))
	})
	for _, o := range []struct {
		name    string
		off, sz uintptr // relative to the sentinel lock
	}{
		{"runs past the end", sentinelLock / 2, sentinelLock},
		{"starts before", ^uintptr(4095), 8192},
		{"covers it", ^uintptr(4095), sentinelLock + 8192},
		{"one byte past the end", 0, sentinelLock + 1},
	} {
		add("partial-overlap lock that "+o.name, func(t *testing.T, w *world) {
			_, err := w.host.LockMem(w.lockBuf+o.off, o.sz)
			isErr(target.ErrOverlap)(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf("%#x", w.lockBuf), "the error names the locked range")
		})
	}
	add("device Alloc of an unknown kind or zero bytes", func(t *testing.T, w *world) {
		_, err := w.host.Alloc(plugin.MemKind(99), 10)
		isErr(target.ErrInvalidArgument)(t, err)
		_, err = w.host.Alloc(plugin.MemDevice, 0)
		isErr(target.ErrInvalidArgument)(t, err)
	})
	add("device Free of nil, foreign, wrong kind", func(t *testing.T, w *world) {
		isErr(target.ErrInvalidArgument)(t, w.host.Free(plugin.MemDevice, 0))
		isErr(target.ErrInvalidArgument)(t, w.host.Free(plugin.MemDevice, hostBuf(t, 4096)))
		p, err := w.host.Alloc(plugin.MemHost, 4096)
		require.NoError(t, err)
		isErr(target.ErrInvalidArgument)(t, w.host.Free(plugin.MemDevice, p))
		require.NoError(t, w.host.Free(plugin.MemHost, p), "the right kind still frees it")
	})
	add("queue used after Close", func(t *testing.T, w *world) {
		q, err := w.host.NewQueue()
		require.NoError(t, err)
		require.NoError(t, q.Close())
		isErr(target.ErrQueueClosed)(t, q.Synchronize(context.Background()))
		_, err = q.Query()
		isErr(target.ErrQueueClosed)(t, err)
		isErr(target.ErrQueueClosed)(t, target.MemcpyAsync(w.lockBuf, w.lockBuf+8, 8, w.host.ID, w.host.ID, q))
	})
	return cs
}

func kmpCases() []badCase {
	var cs []badCase
	add := func(name string, run func(t *testing.T, w *world)) { cs = append(cs, badCase{"kmp/" + name, run}) }
	host := func() int { return kmp.GetInitialDevice() }

	add("omp_free(nil) says nothing", func(t *testing.T, w *world) {
		silent(t, func() { kmp.Free(nil, kmp.DefaultMemAlloc) })
	})
	add("omp_free of a Go pointer", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.Free(goPtr(), kmp.DefaultMemAlloc) }, "omp_free")
	})
	add("omp_free of foreign C memory", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.Free(cmem.Ptr(hostBuf(t, 4096)), kmp.DefaultMemAlloc) }, "omp_free")
	})
	add("omp_free twice", func(t *testing.T, w *world) {
		p := kmp.Alloc(64, kmp.DefaultMemAlloc)
		silent(t, func() { kmp.Free(p, kmp.DefaultMemAlloc) })
		warnsOnce(t, func() { kmp.Free(p, kmp.DefaultMemAlloc) }, "already freed")
	})
	add("omp_free of an interior pointer", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.Free(unsafe.Add(w.blocks[1].p, 64), kmp.DefaultMemAlloc) }, "omp_free")
	})
	add("omp_free through the wrong handle frees right", func(t *testing.T, w *world) {
		p := kmp.Alloc(3000, kmp.AllocatorHandle(ompglue.Handle(w.pooled)))
		require.NotNil(t, p)
		silent(t, func() { kmp.Free(p, kmp.LargeCapMemAlloc) })
	})
	// Issue 9: what a pinned block must survive.
	pinnedBlock := func(w *world) unsafe.Pointer { return w.blocks[2].p } // 1000 bytes, pinned
	for _, off := range []uintptr{0, 16, 999} {
		add(fmt.Sprintf("llvm_omp_target_unlock_mem of a pinned block never locked (+%d)", off), func(t *testing.T, w *world) {
			warnsOnce(t, func() { kmp.TargetUnlockMem(unsafe.Add(pinnedBlock(w), off), w.pinDev.ID) }, "held by the pinned heap")
		})
	}
	add("omp_target_memcpy far past a pinned block", func(t *testing.T, w *world) {
		warnsOnce(t, func() {
			require.Equal(t, -1, kmp.TargetMemcpy(pinnedBlock(w), cmem.Ptr(w.lockBuf), 64, 1<<40, 0, host(), host()))
		}, "out of bounds")
	})
	add("omp_target_memcpy from past the sentinel lock", func(t *testing.T, w *world) {
		warnsOnce(t, func() {
			require.Equal(t, -1, kmp.TargetMemcpy(w.blocks[5].p, cmem.Ptr(w.lockBuf), 64, 0, sentinelLock-32, host(), host()))
		}, "locked range")
	})
	add("omp_target_memcpy of more than an allocator block holds", func(t *testing.T, w *world) {
		warnsOnce(t, func() {
			require.Equal(t, -1, kmp.TargetMemcpy(w.blocks[0].p, w.blocks[1].p, 101, 0, 0, host(), host()))
		}, "allocator block of 100 bytes")
	})
	add("target.Shutdown with pinned blocks live refuses", func(t *testing.T, w *world) {
		err := target.Shutdown()
		require.ErrorIs(t, err, target.ErrBusy)
		d, err := target.Get(target.InitialDevice())
		require.NoError(t, err)
		require.Same(t, w.host, d, "nothing was shut down")
	})
	add("omp_alloc(0) says nothing", func(t *testing.T, w *world) {
		silent(t, func() { require.Nil(t, kmp.Alloc(0, kmp.DefaultMemAlloc)) })
	})
	for _, h := range []kmp.AllocatorHandle{9, 99, 103, 12345, math.MaxUint64} {
		add(fmt.Sprintf("omp_alloc on handle %d", h), func(t *testing.T, w *world) {
			warnsOnce(t, func() { require.Nil(t, kmp.Alloc(10, h)) }, "not a live allocator")
		})
	}
	for _, size := range []uintptr{1 << 62, math.MaxUint64} {
		add(fmt.Sprintf("omp_alloc(%#x)", size), func(t *testing.T, w *world) {
			warnsOnce(t, func() { require.Nil(t, kmp.Alloc(size, kmp.DefaultMemAlloc)) }, "too large")
		})
	}
	add("omp_alloc into a full pool is nil without a warning, as in libomp", func(t *testing.T, w *world) {
		silent(t, func() { require.Nil(t, kmp.Alloc(2<<20, kmp.AllocatorHandle(ompglue.Handle(w.pooled)))) })
	})
	add("omp_calloc overflow", func(t *testing.T, w *world) {
		warnsOnce(t, func() { require.Nil(t, kmp.Calloc(1<<33, 1<<33, kmp.DefaultMemAlloc)) }, "overflow")
	})
	add("omp_aligned_calloc overflow", func(t *testing.T, w *world) {
		warnsOnce(t, func() { require.Nil(t, kmp.AlignedCalloc(64, math.MaxUint64, 2, kmp.DefaultMemAlloc)) }, "overflow")
	})
	for _, al := range []uintptr{0, 3, 48} {
		add(fmt.Sprintf("omp_aligned_alloc(%d)", al), func(t *testing.T, w *world) {
			warnsOnce(t, func() { require.Nil(t, kmp.AlignedAlloc(al, 64, kmp.DefaultMemAlloc)) }, "power of two")
		})
	}
	add("omp_aligned_calloc(3)", func(t *testing.T, w *world) {
		warnsOnce(t, func() { require.Nil(t, kmp.AlignedCalloc(3, 2, 8, kmp.DefaultMemAlloc)) }, "power of two")
	})
	add("omp_realloc of a Go pointer", func(t *testing.T, w *world) {
		warnsOnce(t, func() { require.Nil(t, kmp.Realloc(goPtr(), 10, kmp.DefaultMemAlloc, kmp.DefaultMemAlloc)) }, "omp_realloc")
	})
	add("omp_realloc into an unknown allocator keeps the block", func(t *testing.T, w *world) {
		p := kmp.Alloc(32, kmp.DefaultMemAlloc)
		pattern(bytesAt(p, 32), 77)
		warnsOnce(t, func() { require.Nil(t, kmp.Realloc(p, 64, 12345, kmp.DefaultMemAlloc)) }, "not a live allocator")
		require.True(t, holds(bytesAt(p, 32), 77))
		kmp.Free(p, kmp.NullAllocator)
	})
	add("omp_realloc of a freed block", func(t *testing.T, w *world) {
		p := kmp.Alloc(32, kmp.DefaultMemAlloc)
		kmp.Free(p, kmp.DefaultMemAlloc)
		warnsOnce(t, func() { require.Nil(t, kmp.Realloc(p, 64, kmp.DefaultMemAlloc, kmp.DefaultMemAlloc)) }, "omp_realloc")
	})
	for _, bt := range []kmp.AllocTrait{
		{Key: 99, Value: 1}, {Key: 0, Value: 0}, {Key: kmp.AtkSyncHint, Value: 99}, {Key: kmp.AtkAlignment, Value: 3},
		{Key: kmp.AtkAccess, Value: 99}, {Key: kmp.AtkPoolSize, Value: 0}, {Key: kmp.AtkFallback, Value: 99},
		{Key: kmp.AtkPinned, Value: 2}, {Key: kmp.AtkPartition, Value: 99}, {Key: kmp.AtkPinDevice, Value: 1 << 40},
		{Key: kmp.AtkPreferredDevice, Value: 1 << 40}, {Key: kmp.AtkDeviceAccess, Value: 99},
		{Key: kmp.AtkTargetAccess, Value: 99}, {Key: kmp.AtkAtomicScope, Value: 99}, {Key: kmp.AtkPartSize, Value: 0},
		{Key: kmp.AtkFallback, Value: kmp.AtvAllocatorFb},
	} {
		add(fmt.Sprintf("omp_init_allocator with trait %d=%#x", bt.Key, bt.Value), func(t *testing.T, w *world) {
			warnsOnce(t, func() {
				require.Equal(t, kmp.NullAllocator, kmp.InitAllocator(kmp.DefaultMemSpace, []kmp.AllocTrait{bt}))
			}, "omp_init_allocator", "trait")
		})
	}
	add("omp_init_allocator with fb_data naming no allocator", func(t *testing.T, w *world) {
		warnsOnce(t, func() {
			require.Equal(t, kmp.NullAllocator, kmp.InitAllocator(kmp.DefaultMemSpace,
				[]kmp.AllocTrait{{Key: kmp.AtkFallback, Value: kmp.AtvAllocatorFb}, {Key: kmp.AtkFbData, Value: 12345}}))
		}, "fb_data")
	})
	for _, ms := range []kmp.MemspaceHandle{0, 5, 98, 12345, math.MaxUint64, math.MaxUint64 - 1} {
		add(fmt.Sprintf("omp_init_allocator on memory space %d", ms), func(t *testing.T, w *world) {
			warnsOnce(t, func() {
				require.NotPanics(t, func() { require.Equal(t, kmp.NullAllocator, kmp.InitAllocator(ms, nil)) })
			}, "omp_init_allocator")
		})
	}
	add("omp_destroy_allocator of an unknown handle", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.DestroyAllocator(12345) }, "omp_destroy_allocator")
	})
	add("omp_destroy_allocator of a predefined allocator", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.DestroyAllocator(kmp.DefaultMemAlloc) }, "predefined")
	})
	add("omp_destroy_allocator(omp_null_allocator) says nothing", func(t *testing.T, w *world) {
		silent(t, func() { kmp.DestroyAllocator(kmp.NullAllocator) })
	})
	add("omp_set_default_allocator of an unknown handle", func(t *testing.T, w *world) {
		def := kmp.GetDefaultAllocator()
		warnsOnce(t, func() { kmp.SetDefaultAllocator(12345) }, "omp_set_default_allocator")
		require.Equal(t, def, kmp.GetDefaultAllocator())
	})

	// Every target call with a bad device number (-1 is
	// omp_initial_device, the host: kmp's TestInitialDeviceEveryRoutine).
	for _, dev := range []int{kmp.InvalidDevice, -3, 1 << 20, math.MinInt, math.MaxInt} {
		for _, c := range []struct {
			name string
			call func(w *world, dev int)
		}{
			{"omp_set_default_device", func(w *world, dev int) { kmp.SetDefaultDevice(dev) }},
			{"llvm_omp_target_lock_mem", func(w *world, dev int) {
				if kmp.TargetLockMem(cmem.Ptr(w.lockBuf), 4096, dev) != nil {
					panic("locked")
				}
			}},
			{"llvm_omp_target_unlock_mem", func(w *world, dev int) { kmp.TargetUnlockMem(cmem.Ptr(w.lockBuf), dev) }},
			{"omp_target_alloc", func(w *world, dev int) { mustNil(kmp.TargetAlloc(64, dev)) }},
			{"llvm_omp_target_alloc_host", func(w *world, dev int) { mustNil(kmp.TargetAllocHost(64, dev)) }},
			{"llvm_omp_target_alloc_shared", func(w *world, dev int) { mustNil(kmp.TargetAllocShared(64, dev)) }},
			{"llvm_omp_target_alloc_device", func(w *world, dev int) { mustNil(kmp.TargetAllocDevice(64, dev)) }},
			{"omp_target_free", func(w *world, dev int) { kmp.TargetFree(cmem.Ptr(w.lockBuf), dev) }},
			{"llvm_omp_target_free_host", func(w *world, dev int) { kmp.TargetFreeHost(cmem.Ptr(w.lockBuf), dev) }},
			{"llvm_omp_target_free_shared", func(w *world, dev int) { kmp.TargetFreeShared(cmem.Ptr(w.lockBuf), dev) }},
			{"llvm_omp_target_free_device", func(w *world, dev int) { kmp.TargetFreeDevice(cmem.Ptr(w.lockBuf), dev) }},
			{"omp_target_memcpy (dst)", func(w *world, dev int) {
				mustFail(kmp.TargetMemcpy(cmem.Ptr(w.lockBuf), cmem.Ptr(w.lockBuf+64), 8, 0, 0, dev, kmp.GetInitialDevice()))
			}},
			{"omp_target_memcpy (src)", func(w *world, dev int) {
				mustFail(kmp.TargetMemcpy(cmem.Ptr(w.lockBuf), cmem.Ptr(w.lockBuf+64), 8, 0, 0, kmp.GetInitialDevice(), dev))
			}},
			{"omp_get_device_memspace", func(w *world, dev int) {
				if kmp.GetDeviceMemspace(dev, kmp.DefaultMemSpace) != kmp.NullMemSpace {
					panic("memspace")
				}
			}},
			{"omp_get_device_allocator", func(w *world, dev int) {
				if kmp.GetDeviceAllocator(dev, kmp.DefaultMemSpace) != kmp.NullAllocator {
					panic("allocator")
				}
			}},
		} {
			add(fmt.Sprintf("%s on device %d", c.name, dev), func(t *testing.T, w *world) {
				def := kmp.GetDefaultDevice()
				warnsOnce(t, func() { c.call(w, dev) }, "device")
				require.Equal(t, def, kmp.GetDefaultDevice())
			})
		}
	}
	add("llvm_omp_target_lock_mem of nil and of zero bytes", func(t *testing.T, w *world) {
		warnsOnce(t, func() { mustNil(kmp.TargetLockMem(nil, 64, host())) }, "nil")
		warnsOnce(t, func() { mustNil(kmp.TargetLockMem(cmem.Ptr(w.lockBuf), 0, host())) }, "size 0")
	})
	add("llvm_omp_target_unlock_mem of nil and of what was never locked", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.TargetUnlockMem(nil, host()) }, "nil")
		warnsOnce(t, func() { kmp.TargetUnlockMem(cmem.Ptr(hostBuf(t, 4096)), host()) }, "not locked")
	})
	add("llvm_omp_target_lock_mem partly overlapping the sentinel lock", func(t *testing.T, w *world) {
		warnsOnce(t, func() { mustNil(kmp.TargetLockMem(cmem.Ptr(w.lockBuf+4096), sentinelLock, host())) }, "overlap")
	})
	add("omp_target_alloc of zero bytes", func(t *testing.T, w *world) {
		warnsOnce(t, func() { mustNil(kmp.TargetAlloc(0, host())) }, "size 0")
	})
	add("omp_target_free of foreign memory, of nil", func(t *testing.T, w *world) {
		warnsOnce(t, func() { kmp.TargetFree(cmem.Ptr(hostBuf(t, 4096)), host()) }, "omp_target_free")
		silent(t, func() { kmp.TargetFree(nil, host()) })
	})
	add("llvm_omp_target_free_host of device memory, then the right free", func(t *testing.T, w *world) {
		p := kmp.TargetAllocDevice(4096, host())
		require.NotNil(t, p)
		warnsOnce(t, func() { kmp.TargetFreeHost(p, host()) }, "llvm_omp_target_free_host")
		silent(t, func() { kmp.TargetFreeDevice(p, host()) })
	})
	add("omp_target_memcpy with nil or wrapping offsets", func(t *testing.T, w *world) {
		h := host()
		warnsOnce(t, func() { mustFail(kmp.TargetMemcpy(nil, cmem.Ptr(w.lockBuf), 8, 0, 0, h, h)) }, "nil")
		warnsOnce(t, func() {
			mustFail(kmp.TargetMemcpy(cmem.Ptr(w.lockBuf), cmem.Ptr(w.lockBuf), 8, math.MaxUint64, 0, h, h))
		}, "wraps")
		silent(t, func() { require.Zero(t, kmp.TargetMemcpy(nil, nil, 0, 0, 0, h, h)) })
	})
	return cs
}

func mustNil(p unsafe.Pointer) {
	if p != nil {
		panic(fmt.Sprintf("want nil, got %p", p))
	}
}

func mustFail(rc int) {
	if rc == 0 {
		panic("want a non-zero result")
	}
}

// Every bad input gives a clear error (Go API) or nil and exactly one
// warning line (kmp), never a panic or an exit, and leaves every other
// block and lock intact.
func TestBadInputs(t *testing.T) {
	w := newWorld(t)
	cases := append(goAPICases(), kmpCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotPanics(t, func() { c.run(t, w) })
			w.intact(t)
		})
	}
	w.close(t)
	t.Logf("bad inputs tried: %d cases (plus %d malformed OMP_ALLOCATOR values in a child)", len(cases), len(malformedAllocatorEnv))
}
