package alloc

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/hooks"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/memspace"
)

// Free looks beyond the heap only while hooks.FreeChecks is not 0: each of
// its reasons (leak-check mode, a sampled block live) counts while it
// holds and not after, and a sampled block is still forgotten at its free.
func TestFreeChecksFollowTheirReasons(t *testing.T) {
	was := SetLeakCheck(false)
	t.Cleanup(func() { SetLeakCheck(was) })
	old := memsample.Rate()
	t.Cleanup(func() { memsample.SetRate(old) })
	memsample.SetRate(0)
	base := hooks.FreeChecks.Load()

	require.False(t, SetLeakCheck(true))
	require.Equal(t, base+1, hooks.FreeChecks.Load(), "leak check on")
	require.True(t, SetLeakCheck(true))
	require.Equal(t, base+1, hooks.FreeChecks.Load(), "on twice counts once")
	require.True(t, SetLeakCheck(false))
	require.Equal(t, base, hooks.FreeChecks.Load(), "leak check off")

	a := mustNew(t, memspace.Default)
	memsample.SetRate(1) // every block sampled
	p, err := a.Alloc(64)
	require.NoError(t, err)
	memsample.SetRate(0)
	require.True(t, memsample.Tracking())
	require.Equal(t, base+1, hooks.FreeChecks.Load(), "a sampled block live")
	require.NoError(t, Free(p))
	require.Equal(t, base, hooks.FreeChecks.Load(), "its free forgot it")
}
