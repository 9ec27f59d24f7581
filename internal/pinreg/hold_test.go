package pinreg

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// A held range (a pinned heap's chunk) is unreachable by Unlock and
// UnlockUnmapped; user locks inside it are counted apart; Release drops
// them all and unlocks once.
func TestHoldIsNotReachableByUnlock(t *testing.T) {
	f := newFake()
	r := New(f)
	const p, n = 0x10_0000, 0x40_0000
	dev, err := r.Hold(p, n, "the test heap")
	require.NoError(t, err)
	require.Equal(t, uintptr(p+devOffset), dev)

	for _, at := range []uintptr{p, p + 100, p + n - 1} {
		err := r.Unlock(at)
		require.ErrorIs(t, err, ErrNotLocked)
		require.ErrorContains(t, err, "held by the test heap")
		require.ErrorIs(t, r.UnlockUnmapped(at, MapMandatory), ErrNotLocked)
	}
	in, ok := r.Entry(p)
	require.True(t, ok, "nothing changed")
	require.Zero(t, in.Refs)
	require.Equal(t, KindLocked, in.Kind)
	st := r.Stats()
	require.Equal(t, 1, st.HeldEntries, "Stats counts the held entry")
	require.Equal(t, uintptr(n), st.HeldBytes)

	_, err = r.Lock(p+64, 64)
	require.NoError(t, err)
	_, _, err = r.LockMapped(p+128, 64, MapOn)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(p+64))
	require.ErrorIs(t, r.Unlock(p+64), ErrNotLocked, "one lock, one unlock")
	_, err = r.Lock(p+64, 64)
	require.NoError(t, err)

	_, err = r.Hold(p+n-8, 16, "another")
	require.ErrorIs(t, err, ErrOverlap)
	_, _, err = r.Release(p + 8)
	require.ErrorIs(t, err, sentinel.ErrInvalidArgument, "interior pointer")
	require.ErrorIs(t, r.Unregister(p), sentinel.ErrInvalidArgument, "not registered")

	locks, mapped, err := r.Release(p)
	require.NoError(t, err)
	require.Equal(t, 1, locks)
	require.Equal(t, 1, mapped)
	require.Zero(t, r.Len())
	require.Zero(t, r.Stats().HeldEntries, "released")
	l, u, held, problems := f.snapshot()
	require.Equal(t, 1, l)
	require.Equal(t, 1, u)
	require.Empty(t, held)
	require.Empty(t, problems)
	_, ok = r.Held(p)
	require.False(t, ok)
	_, _, err = r.Release(p)
	require.ErrorIs(t, err, ErrNotLocked)
}

// A Locker that reports ErrStillLocked keeps the entry and its reference:
// the unlock can be retried, and the registry never says unlocked while
// the memory is locked.
func TestUnlockStillLockedKeepsEntry(t *testing.T) {
	f := newFake()
	f.stillLocked = true
	r := New(f)
	const p, n = 0x20_0000, 0x1000
	_, err := r.Lock(p, n)
	require.NoError(t, err)
	f.failUnlock = true
	err = r.Unlock(p)
	require.ErrorIs(t, err, ErrStillLocked)
	require.ErrorIs(t, err, errFake)
	in, ok := r.Entry(p)
	require.True(t, ok, "entry kept")
	require.Equal(t, 1, in.Refs, "reference kept")
	require.True(t, r.IsPinned(p))
	require.NoError(t, r.Unlock(p), "the retry unlocks")
	require.Zero(t, r.Len())

	_, err = r.Hold(p, n, "heap")
	require.NoError(t, err)
	f.failUnlock = true
	_, _, err = r.Release(p)
	require.ErrorIs(t, err, ErrStillLocked)
	owner, ok := r.Held(p)
	require.True(t, ok)
	require.Equal(t, "heap", owner)
	require.ErrorIs(t, r.Unlock(p), ErrNotLocked, "still held, still unreachable")
	_, _, err = r.Release(p)
	require.NoError(t, err)
	require.Zero(t, r.Len())
	st := r.Stats()
	require.Equal(t, uint64(2), st.UnlockFailures)
	_, _, _, problems := f.snapshot()
	require.Empty(t, problems)
}
