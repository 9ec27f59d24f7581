package alloc

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/predef"
)

// Issue 10, item 5: OMPALLOC_PINNED_LIMIT=banana says what a size is, in
// the warning voice of the rest of the runtime, without strconv's words.
func TestPinnedLimitWarningSaysWhatIsAccepted(t *testing.T) {
	t.Setenv(envvar.PinnedLimit, "banana")
	warn := captureWarnings(t)
	l := &limit{}
	l.init()
	w := warn.String()
	require.True(t, strings.HasPrefix(w, "ompalloc: warning: "+envvar.PinnedLimit+`="banana": `), "%q", w)
	require.Contains(t, w, `not a size: give bytes, or a number with one suffix K, M, G or T (powers of 1024)`)
	require.NotContains(t, w, "strconv")
	require.NotContains(t, w, "invalid syntax")
}

// Issue 29, item 6: one rule for empty values, here as in package target:
// OMPALLOC_PINNED_LIMIT, OMPALLOC_HUGEPAGES and OMP_ALLOCATOR set to
// nothing or to white space count as unset (no warning, the default),
// where "  " warned for two of them.
func TestBlankEnvCountsAsUnset(t *testing.T) {
	old := defaultAlloc.Load()
	t.Cleanup(func() { defaultAlloc.Store(old) })
	for _, value := range []string{"", "  \t"} {
		t.Run(strconv.Quote(value), func(t *testing.T) {
			t.Setenv(envvar.PinnedLimit, value)
			t.Setenv(envvar.HugePages, value)
			t.Setenv(envvar.Allocator, value)
			warn := captureWarnings(t)
			l := &limit{}
			l.init()
			require.Equal(t, defaultPinnedLimit(), l.max.Load())
			require.Equal(t, HugePagesTHP, hugeModeFromEnv())
			applyEnv()
			require.Equal(t, handle(predef.DefaultMem), defaultAlloc.Load().handle())
			require.Empty(t, warn.String())
		})
	}
}

// Issue 29, item 6: a warning is one line. An OMP_ALLOCATOR trait value
// holding a newline printed a second line that read as its own
// "ompalloc: warning:", and raw ESC and CR reached stderr: the trait's key
// and value were written with %s. They are quoted now, and the warning
// line escapes any control character a message still carries.
func TestEnvAllocatorWarningIsOneLine(t *testing.T) {
	old := defaultAlloc.Load()
	t.Cleanup(func() { defaultAlloc.Store(old) })
	for _, value := range []string{
		"omp_default_mem_space:pool_size=12\nompalloc: warning: forged",
		"omp_default_mem_space:alignment=\x1b[31m64",
		"omp_default_mem_space:fallback=null_fb\r\x1b[2K",
		"omp_default_mem_space:pinned=tr\aue",
	} {
		t.Run(strconv.Quote(value), func(t *testing.T) {
			t.Setenv(envvar.Allocator, value)
			warn := captureWarnings(t)
			applyEnv()
			require.Equal(t, handle(predef.DefaultMem), defaultAlloc.Load().handle())
			w := warn.String()
			require.Equal(t, 1, strings.Count(w, "\n"), "one line: %q", w)
			require.True(t, strings.HasSuffix(w, "\n"))
			require.True(t, strings.HasPrefix(w, "ompalloc: warning: "+envvar.Allocator+"=\""), "%q", w)
			for _, c := range w[:len(w)-1] {
				require.False(t, c < 0x20 || c == 0x7f, "control character %q in %q", c, w)
			}
		})
	}
}
