package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 10, item 5: the help texts print cleanly: no tab-indented
// continuation lines, no flag with two defaults ("(default: the first
// accelerator ...) (default -1)"), continuation lines under the description.
func TestHelpTextsReadCleanly(t *testing.T) {
	for _, cmd := range []string{"info", "bench"} {
		t.Run(cmd, func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 0, run([]string{"help", cmd}, &out, &errOut), errOut.String())
			text := out.String()
			require.NotContains(t, text, "\t")
			for _, l := range strings.Split(text, "\n") {
				require.LessOrEqual(t, strings.Count(l, "(default"), 1, "%q", l)
			}
			flags := text[strings.Index(text, "Flags:"):]
			for _, l := range strings.Split(flags, "\n")[1:] {
				if l == "" {
					continue
				}
				require.True(t, strings.HasPrefix(l, "  --") || strings.HasPrefix(l, strings.Repeat(" ", 25)),
					"a flag line or a continuation under its description: %q", l)
			}
		})
	}
	var out bytes.Buffer
	run([]string{"help", "bench"}, &out, &out)
	require.NotContains(t, out.String(), "(default -1)")
	require.Contains(t, out.String(), "Progress goes\nto stderr: a bar on a terminal, else one line per case (--quiet: none).")
}
