package alloc

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// TestTargetMemspacesDefaultToNullFb: OpenMP 6.0 makes null_fb the default
// fallback on target memory spaces; an explicit fallback still wins, and
// host memory spaces keep default_mem_fb.
func TestTargetMemspacesDefaultToNullFb(t *testing.T) {
	hostOnly, err := memspace.OnDevices(memspace.Default, []int{target.InitialDevice()}, true)
	require.NoError(t, err)
	cases := []struct {
		name string
		ms   memspace.ID
		ts   []traits.Trait
		want traits.FallbackMode
	}{
		{"target device", memspace.TargetDevice, nil, traits.NullFb},
		{"target host", memspace.TargetHost, nil, traits.NullFb},
		{"target shared, alignment only", memspace.TargetShared, []traits.Trait{{Key: traits.Alignment, Value: 64}}, traits.NullFb},
		{"target device, default_mem_fb asked", memspace.TargetDevice, []traits.Trait{{Key: traits.Fallback, Value: traits.DefaultMemFb}}, traits.DefaultMemFb},
		{"default memory space", memspace.Default, nil, traits.DefaultMemFb},
		{"host-only device memory space", hostOnly, nil, traits.DefaultMemFb},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := NewFromTraits(c.ms, c.ts)
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Destroy()) }()
			require.Equal(t, c.want, a.Traits().Fallback)
		})
	}
}
