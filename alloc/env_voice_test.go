package alloc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 10, item 5: OMPALLOC_PINNED_LIMIT=banana says what a size is, in
// the warning voice of the rest of the runtime, without strconv's words.
func TestPinnedLimitWarningSaysWhatIsAccepted(t *testing.T) {
	t.Setenv(PinnedLimitEnv, "banana")
	warn := captureWarnings(t)
	l := &limit{}
	l.init()
	w := warn.String()
	require.True(t, strings.HasPrefix(w, "ompalloc: warning: "+PinnedLimitEnv+`="banana": `), "%q", w)
	require.Contains(t, w, `not a size: give bytes, or a number with one suffix K, M, G or T (powers of 1024)`)
	require.NotContains(t, w, "strconv")
	require.NotContains(t, w, "invalid syntax")
}
