package mdsnippet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGoSnippetsParser(t *testing.T) {
	md := "text\n```go\npackage main\n// Output:\n// 1\n// two\n```\n```sh\nls\n```\n```go\nx := 1\n```\n"
	s := Go(md)
	require.Len(t, s, 2)
	require.Equal(t, 2, s[0].Line)
	require.Equal(t, "package main\n// Output:\n// 1\n// two\n", s[0].Code)
	want, ok := WantOutput(s[0].Code)
	require.True(t, ok)
	require.Equal(t, "1\ntwo\n", want)
	_, ok = WantOutput(s[1].Code)
	require.False(t, ok)
}
