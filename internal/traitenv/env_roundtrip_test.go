package traitenv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/traits"
)

// Issue 9, item 7: 2^64-1 is no size, and what EnvSpec.String writes,
// ParseEnv reads back.
func TestParseEnvHugeNumbersAndRoundTrip(t *testing.T) {
	for _, v := range []string{
		"omp_default_mem_space:pool_size=18446744073709551615",
		"omp_default_mem_space:alignment=18446744073709551615",
		"omp_default_mem_space:pool_size=18446744073709551616",
	} {
		_, err := ParseEnv(v)
		require.ErrorContains(t, err, "too large", v)
	}
	for _, v := range []string{
		"omp_default_mem_space:pool_size=default",
		"omp_default_mem_space:alignment=default,pinned=true",
		"omp_default_mem_space:fallback=default,pool_size=4096",
		"omp_large_cap_mem_space:alignment=64,pool_size=1048576,fallback=null_fb",
	} {
		e, err := ParseEnv(v)
		require.NoError(t, err, v)
		back, err := ParseEnv(e.String())
		require.NoError(t, err, "%s wrote %s", v, e.String())
		require.Equal(t, e, back)
		s1, err := traits.FromList(e.Traits)
		require.NoError(t, err)
		s2, err := traits.FromList(back.Traits)
		require.NoError(t, err)
		require.Equal(t, s1, s2)
	}
	e := EnvSpec{Memspace: 1, Traits: []traits.Trait{{Key: traits.PoolSize, Value: traits.Default}}}
	back, err := ParseEnv(e.String())
	require.NoError(t, err, e.String())
	require.Equal(t, e, back)
}
