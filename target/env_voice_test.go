package target

import (
	"github.com/ompalloc/ompalloc/internal/device"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Issue 10, item 5: every warning about the environment starts with
// "ompalloc: warning:", and a size that does not parse says what is
// accepted, not strconv's words.
func TestEnvWarningsSpeakWithOneVoice(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		says        []string
	}{
		{envvar.DefaultDevice, "99", []string{"not a device number in 0..2", "using 0"}},
		{envvar.StagingThreshold, "banana", []string{`="banana": not a size: give bytes, or a number with one suffix K, M, G or T`}},
		{envvar.StagingPool, "16777216T", []string{`="16777216T": too large`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			warned := captureWarnings(t)
			withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{newFake("a", 0), newFake("b", 0)}})
			_, err := Get(0)
			require.NoError(t, err)
			w := warned()
			require.Equal(t, 1, strings.Count(w, "\n"), "one line: %q", w)
			require.True(t, strings.HasPrefix(w, "ompalloc: warning: "+tc.name+"="), "%q", w)
			for _, s := range tc.says {
				require.Contains(t, w, s)
			}
			require.NotContains(t, w, "strconv")
		})
	}
}

// Issue 29, item 6: one rule for empty values. An empty
// OMPALLOC_STAGING_*= warned while an empty OMPALLOC_PINNED_LIMIT= counted
// as unset; now a variable set to nothing or to white space counts as
// unset everywhere (internal/envvar): no warning, the default.
func TestBlankEnvCountsAsUnset(t *testing.T) {
	for _, name := range []string{envvar.DefaultDevice, envvar.StagingThreshold, envvar.StagingPool, envvar.LockMapped} {
		for _, value := range []string{"", "  \t"} {
			t.Run(name+"="+value, func(t *testing.T) {
				t.Setenv(name, value)
				warned := captureWarnings(t)
				withPlugins(t, &fakePlugin{name: "f", impls: []plugin.Impl{newFake("a", 0), newFake("b", 0)}})
				_, err := Get(0)
				require.NoError(t, err)
				require.Empty(t, warned(), "a blank %s is unset", name)
				cfg, mode := readEnv()
				require.Equal(t, defaultStagingConfig(), cfg)
				require.Equal(t, "off", mode.String())
				require.Equal(t, 0, device.EnvDefault(2))
			})
		}
	}
}
