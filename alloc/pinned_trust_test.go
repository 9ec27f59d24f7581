package alloc

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/warn"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// pinnedWorld is what must agree about pinned memory: VmLck, the registry
// and the pinned heaps' statistics. VmLck counts mlock, so these tests pin
// on the host device: with a GPU as the default device its driver would pin
// (cuMemHostRegister), which VmLck does not show.
type pinnedWorld struct {
	vmLck   int
	entries int
	held    int
	bytes   uintptr
}

func pinnedNow(t *testing.T) pinnedWorld {
	t.Helper()
	d, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	st := d.Registry().Stats()
	return pinnedWorld{vmLck: vmLckKiB(t), entries: st.Entries, held: st.HeldEntries, bytes: ReadPinnedStats().Bytes}
}

func captureWarnings(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	restore := warn.SetOutput(&buf)
	t.Cleanup(func() { restore() })
	return &buf
}

// Issue 9, item 1: a user's unlock of a pinned block must not unlock the
// pinned heap's chunk. It is an error naming what holds the memory, and
// nothing changes.
func TestUserUnlockCannotUnpinAPinnedChunk(t *testing.T) {
	stayOnOneNode(t) // the next block from the same chunk
	Trim()
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	defer func() { Trim() }()
	defer func() { require.NoError(t, a.Destroy()) }()
	p, err := a.Alloc(64)
	require.NoError(t, err)
	defer func() { require.NoError(t, Free(p)) }()
	before := pinnedNow(t)
	statsBefore := a.Stats()

	d, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	err = d.UnlockMem(uintptr(p))
	require.ErrorIs(t, err, target.ErrNotLocked)
	require.ErrorContains(t, err, "held by the pinned heap of device")
	require.ErrorContains(t, err, "0 Lock")
	require.Equal(t, before, pinnedNow(t), "VmLck, registry and pinned bytes unchanged")
	require.Equal(t, statsBefore.PinnedBytes, a.Stats().PinnedBytes)
	require.True(t, registered(d.Registry(), uintptr(p)))
	require.Positive(t, before.held, "the chunk is held by the pinned heap")

	// The next block of the chunk is still locked.
	q, err := a.Alloc(64)
	require.NoError(t, err)
	require.True(t, registered(d.Registry(), uintptr(q)))
	require.NoError(t, Free(q))

	// A user's own lock inside the block is counted apart and undone alone.
	_, err = d.LockMem(uintptr(p), 64)
	require.NoError(t, err)
	require.NoError(t, d.UnlockMem(uintptr(p)))
	require.ErrorIs(t, d.UnlockMem(uintptr(p)), target.ErrNotLocked)
	require.Equal(t, before, pinnedNow(t))
}

// Issue 9, item 5: a user lock inside a pinned block must not outlive the
// chunk. Releasing the chunk drops it with one warning; no stale entry
// survives, and the next chunk mapped there is locked.
func TestUserLockInsideReleasedChunkIsDropped(t *testing.T) {
	Trim()
	base := pinnedNow(t)
	warn := captureWarnings(t)
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	p, err := a.Alloc(64)
	require.NoError(t, err)
	d, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	_, err = d.LockMem(uintptr(p), 64)
	require.NoError(t, err)
	_, err = d.LockMem(uintptr(p)+16, 16)
	require.NoError(t, err)
	require.NoError(t, Free(p))
	require.NoError(t, a.Destroy())
	Trim()
	require.Equal(t, base, pinnedNow(t), "no entry, no locked page, no pinned byte left")
	require.Equal(t, 1, bytes.Count(warn.Bytes(), []byte("\n")), warn.String())
	require.Contains(t, warn.String(), "with 2 locks (TargetLockMem)")
	require.False(t, registered(d.Registry(), uintptr(p)))
	require.ErrorIs(t, d.UnlockMem(uintptr(p)), target.ErrNotLocked, "the user's late unlock finds nothing")

	// A new chunk, quite possibly at the same address, is locked.
	b := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	q, err := b.Alloc(64)
	require.NoError(t, err)
	require.True(t, registered(d.Registry(), uintptr(q)))
	in, ok := d.Registry().Entry(uintptr(q))
	require.True(t, ok)
	require.Zero(t, in.Refs, "no user reference carried over")
	require.NoError(t, Free(q))
	require.NoError(t, b.Destroy())
	Trim()
	require.Equal(t, base, pinnedNow(t))
}

// Issue 9, item 4: target.Shutdown with pinned blocks live refuses and
// changes nothing; once they are freed it gives back the idle chunks
// itself, and the devices discovered next know every pinned block.
func TestShutdownWithLivePinnedBlocks(t *testing.T) {
	Trim()
	base := pinnedNow(t)
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	p, err := a.Alloc(64)
	require.NoError(t, err)
	before := pinnedNow(t)
	d, err := target.Get(target.InitialDevice())
	require.NoError(t, err)

	err = target.Shutdown()
	require.ErrorIs(t, err, target.ErrBusy)
	require.ErrorContains(t, err, "live pinned blocks")
	require.Equal(t, before, pinnedNow(t), "nothing changed")
	d2, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	require.Same(t, d, d2, "the devices were not shut down")
	require.True(t, registered(d2.Registry(), uintptr(p)))

	require.NoError(t, Free(p)) // the chunk stays cached in the heap
	require.NoError(t, target.Shutdown())
	require.Equal(t, base, pinnedNow(t), "the idle chunk was given back")

	q, err := a.Alloc(64)
	require.NoError(t, err)
	d3, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	require.NotSame(t, d, d3)
	require.True(t, registered(d3.Registry(), uintptr(q)), "the new device knows the new chunk")
	require.Greater(t, pinnedNow(t).vmLck, base.vmLck)
	require.NoError(t, Free(q))
	require.NoError(t, a.Destroy())
	Trim()
	require.Equal(t, base, pinnedNow(t))
}

// Issue 9, item 3: a chunk whose unlock the device refuses, keeping it
// locked (munlock at vm.max_map_count: internal/plugin/host.TestMapCount), stays
// locked, registered, mapped and counted, in Stats and the limit alike, and
// the next Trim releases it.
func TestChunkTheDeviceCannotUnlockStaysCounted(t *testing.T) {
	Trim()
	base := pinnedNow(t)
	_, baseUsed := pinnedLimit()
	a := mustNew(t, memspace.Default, WithPinned(true), WithPinDevice(target.InitialDevice()), WithFallback(traits.NullFb))
	p, err := a.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, Free(p))
	locked := pinnedNow(t)
	_, lockedUsed := pinnedLimit()

	disarm := armFault(t, fault.PinUnlock, 1, nil)
	require.NoError(t, a.Destroy()) // trims the pinned heap: the release fails
	disarm()
	require.Equal(t, 1, fault.Fired(fault.PinUnlock))
	require.Equal(t, locked, pinnedNow(t), "still locked, registered and counted")
	_, used := pinnedLimit()
	require.Equal(t, lockedUsed, used)
	require.Equal(t, uintptr(4<<20), ReadPinnedStats().Bytes-base.bytes)

	Trim()
	require.Equal(t, base, pinnedNow(t))
	_, used = pinnedLimit()
	require.Equal(t, baseUsed, used)
}

// Issue 9, item 6: WithPinned(true) never hands unpinned memory to a caller
// who did not ask for a fallback; with one, a fallback that fails too keeps
// the first cause and names the allocator that was asked.
func TestPinnedNeverFallsBackUnasked(t *testing.T) {
	Trim()
	old := SetPinnedLimit(1) // every new chunk is refused
	defer SetPinnedLimit(old)

	a := mustNew(t, memspace.Default, WithPinned(true))
	defer func() { require.NoError(t, a.Destroy()) }()
	require.Equal(t, traits.FallbackMode(traits.NullFb), a.Traits().Fallback)
	p, err := a.Alloc(64)
	require.ErrorIs(t, err, ErrPinFailed)
	require.Nil(t, p)
	require.ErrorContains(t, err, a.String())
	require.Zero(t, a.Stats().Fallbacks)

	// Asked for: plain memory, counted.
	b := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.DefaultMemFb))
	defer func() { require.NoError(t, b.Destroy()) }()
	q, err := b.Alloc(64)
	require.NoError(t, err)
	require.NotNil(t, q)
	require.False(t, isPinned(t, q))
	require.Equal(t, uint64(1), b.Stats().Fallbacks)
	require.NoError(t, Free(q))

	// The fallback fails too: the first cause stays, with the allocator asked.
	_, err = b.Alloc(1 << 45)
	require.ErrorIs(t, err, ErrPinFailed)
	require.ErrorContains(t, err, b.String())
	require.ErrorContains(t, err, "omp_default_mem_alloc")

	// NewFromTraits keeps OpenMP's default_mem_fb.
	c, err := NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Pinned, Value: traits.True}})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Destroy()) }()
	require.Equal(t, traits.FallbackMode(traits.DefaultMemFb), c.Traits().Fallback)
}

// Issue 9, item 6: the pinned allocator OMP_ALLOCATOR makes keeps OpenMP's
// default_mem_fb and warns once when a failed pin first falls back.
func TestEnvPinnedAllocatorWarnsOnFallback(t *testing.T) {
	Trim()
	old := SetPinnedLimit(1)
	defer SetPinnedLimit(old)
	a, err := fromEnv("omp_default_mem_space:pinned=true")
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Destroy()) }()
	warn := captureWarnings(t)
	for i := 0; i < 3; i++ {
		p, err := a.Alloc(64)
		require.NoError(t, err)
		require.False(t, isPinned(t, p))
		require.NoError(t, Free(p))
	}
	require.Equal(t, 1, bytes.Count(warn.Bytes(), []byte("\n")), warn.String())
	require.Contains(t, warn.String(), "OMP_ALLOCATOR")
	require.Contains(t, warn.String(), "cannot pin memory")
}
