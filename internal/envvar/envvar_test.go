package envvar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookup(t *testing.T) {
	const name = "OMPALLOC_ENVVAR_TEST"
	for _, tc := range []struct {
		value string
		want  string
		set   bool
	}{
		{"", "", false},
		{"  \t", "", false},
		{"64K", "64K", true},
		{" 64K\n", "64K", true},
	} {
		t.Setenv(name, tc.value)
		v, set := Lookup(name)
		require.Equal(t, tc.want, v, "%q", tc.value)
		require.Equal(t, tc.set, set, "%q", tc.value)
	}
	v, set := Lookup("OMPALLOC_ENVVAR_TEST_NEVER_SET")
	require.False(t, set)
	require.Empty(t, v)
}
