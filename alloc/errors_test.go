package alloc

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// sentinels are the package's exported errors (errors.go).
var sentinels = []error{
	ErrInvalidTrait, ErrInvalidArgument, ErrPoolExhausted, ErrOutOfMemory, ErrPinFailed,
	ErrNotSupported, ErrInvalidPointer, ErrDoubleFree, ErrTooLarge, ErrDevice, ErrOverflow,
	ErrDestroyed, ErrLiveBlocks, ErrPlacement,
}

// Every error the API returns matches an exported sentinel, the one named.
func TestEveryErrorMatchesASentinel(t *testing.T) {
	strict := mustNew(t, memspace.Default, WithFallback(traits.NullFb))
	pool := mustNew(t, memspace.Default, WithPoolSize(4096), WithFallback(traits.NullFb))
	th := mustNew(t, memspace.TargetHost)
	farDevice := mustNew(t, memspace.TargetHost, WithTrait(traits.PreferredDevice, 99), WithFallback(traits.NullFb))
	live := mustNew(t, memspace.Default)
	lp, err := live.Alloc(8)
	require.NoError(t, err)
	dead, err := New(memspace.Default)
	require.NoError(t, err)
	require.NoError(t, dead.Destroy())
	p, err := strict.Alloc(100)
	require.NoError(t, err)
	freed, err := strict.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, Free(freed))
	tp, err := th.Alloc(64)
	require.NoError(t, err)
	hostDev, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	closed, err := hostDev.NewQueue()
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	var local [64]byte
	foreign := unsafe.Pointer(&local[0])

	type result struct {
		err  error
		want error
	}
	r := func(_ any, err error) error { return err }
	cases := map[string]result{
		"size too large":            {r(strict.Alloc(1 << 50)), ErrTooLarge},
		"bad alignment":             {r(strict.AlignedAlloc(3, 8)), ErrInvalidArgument},
		"calloc overflow":           {r(strict.Calloc(1<<40, 1<<40)), ErrOverflow},
		"pool exhausted":            {r(pool.Alloc(8192)), ErrPoolExhausted},
		"destroyed allocator":       {r(dead.Alloc(8)), ErrDestroyed},
		"destroy twice":             {dead.Destroy(), ErrDestroyed},
		"destroy predefined":        {Default().Destroy(), ErrInvalidArgument},
		"bad trait":                 {r(New(memspace.Default, WithAlignment(3))), ErrInvalidTrait},
		"bad memory space":          {r(New(memspace.ID(12345))), ErrInvalidArgument},
		"bad pin device":            {r(New(memspace.Default, WithPinned(true), WithPinDevice(99))), ErrInvalidTrait},
		"free foreign":              {Free(foreign), ErrInvalidPointer},
		"free interior":             {Free(unsafe.Add(p, 16)), ErrInvalidPointer},
		"double free":               {Free(freed), ErrDoubleFree},
		"realloc foreign":           {r(realloc(foreign, 10, nil)), ErrInvalidPointer},
		"realloc freed":             {r(realloc(freed, 10, nil)), ErrDoubleFree},
		"realloc target memory":     {r(realloc(tp, 128, nil)), ErrNotSupported},
		"block size foreign":        {r(blockSize(foreign)), ErrInvalidPointer},
		"block size interior":       {r(blockSize(unsafe.Add(p, 16))), ErrInvalidPointer},
		"owner foreign":             {r(ownerOf(foreign)), ErrInvalidPointer},
		"inspect freed":             {r(Inspect(freed)), ErrDoubleFree},
		"no such device":            {r(farDevice.Alloc(64)), ErrDevice},
		"make of pointers":          {r(Make[*int](strict, 4)), ErrInvalidArgument},
		"make negative":             {r(Make[int](strict, -1)), ErrInvalidArgument},
		"free slice of another":     {FreeSlice(pool, unsafe.Slice((*byte)(p), 100)), ErrInvalidArgument},
		"resize negative":           {r(Resize(strict, unsafe.Slice((*byte)(p), 100), -1)), ErrInvalidArgument},
		"target memory zeroed here": {r(Make[byte](farDevice, 4)), ErrDevice},
		"free after a closed queue": {FreeAfter(p, closed), ErrDevice},
		"free after a nil queue":    {FreeAfter(p, nil), ErrInvalidArgument},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			require.Error(t, c.err)
			require.ErrorIs(t, c.err, c.want)
			matched := false
			for _, s := range sentinels {
				matched = matched || errors.Is(c.err, s)
			}
			require.True(t, matched, "%v matches an exported sentinel", c.err)
		})
	}
	require.ErrorIs(t, cases["no such device"].err, target.ErrBadDevice, "the device layer's error is kept beneath")

	require.NoError(t, Free(p))
	require.NoError(t, Free(tp))
	err = live.Destroy()
	require.ErrorIs(t, err, ErrLiveBlocks)
	require.NoError(t, Free(lp))
}
