package alloc

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cgroup"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 29, item 3: the pinned limit was decided once. Lowering the
// group's memory.max from 512 MiB to 128 MiB while the process ran left
// the limit at 268,435,456, and the process was OOM-killed after 120 MiB.
// Each chunk or region to lock now takes the cgroup's share again: here a
// fixture cgroup (cgroupNow) whose usage is 10 MiB plus what is pinned,
// lowered after 32 MiB; the pins stop at half the new limit with an error
// naming the cgroup, before the room runs out. The real-cgroup version runs
// in internal/reliability (TestCgroupLimitLoweredWhileRunning).
func TestPinnedLimitFollowsTheCgroupNow(t *testing.T) {
	Trim()
	var limitBytes atomic.Int64
	limitBytes.Store(512 << 20)
	old := cgroupNow
	cgroupNow = func() (cgroup.Limit, bool) {
		return cgroup.Limit{Bytes: limitBytes.Load(), Usage: 10<<20 + pinLimit.used.Load(), Version: 2, File: "/sys/fs/cgroup/app/memory.max"}, true
	}
	prev := SetPinnedLimit(256 << 20) // what the default was at 512 MiB
	t.Cleanup(func() { cgroupNow = old; SetPinnedLimit(prev); Trim() })

	a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	var held []unsafe.Pointer
	t.Cleanup(func() {
		for _, p := range held {
			require.NoError(t, Free(p))
		}
	})
	_, base := pinnedLimit()
	pin := func() error {
		p, err := a.Alloc(4<<20 - 64<<10) // a region of its own, locked whole
		if err == nil {
			held = append(held, p)
		}
		return err
	}
	for range 8 {
		require.NoError(t, pin())
	}
	limitBytes.Store(128 << 20) // lowered while the process runs
	var err error
	for range 64 {
		if err = pin(); err != nil {
			break
		}
	}
	require.Error(t, err, "pinning goes on past the lowered cgroup")
	require.ErrorIs(t, err, ErrPinFailed)
	for _, w := range []string{"cgroup v2 memory.max of 128 MiB", "/sys/fs/cgroup/app/memory.max", "raise its memory limit", "OOM killer"} {
		require.ErrorContains(t, err, w)
	}
	_, used := pinnedLimit()
	t.Logf("pinned %d MiB, then: %v", (used-base)>>20, err)
	require.LessOrEqual(t, int64(used), int64(64<<20), "at most half the lowered limit")
	require.Greater(t, int64(used), int64(56<<20), "up to it")
}
