// Package mdsnippet reads the Go code blocks of a Markdown file and the
// output they promise, for the tests that run the README's snippets (the
// examples package with stand-in modules, examples/ecosystem with the real
// ones): one parser, so both run the same snippets.
package mdsnippet

import (
	"bufio"
	"strings"
)

// Snippet is one ```go block of a Markdown file.
type Snippet struct {
	Line int // where the block starts
	Code string
}

// Go returns the ```go blocks of the Markdown text.
func Go(md string) []Snippet {
	var out []Snippet
	var cur *strings.Builder
	start := 0
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur, start = new(strings.Builder), n
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, Snippet{Line: start, Code: cur.String()})
			cur = nil
		case cur != nil:
			cur.WriteString(l + "\n")
		}
	}
	return out
}

// WantOutput is the text of a trailing "// Output:" comment, as in
// Example functions, and whether there is one.
func WantOutput(code string) (string, bool) {
	i := strings.LastIndex(code, "// Output:")
	if i < 0 {
		return "", false
	}
	var b strings.Builder
	for _, l := range strings.Split(code[i:], "\n")[1:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "//") {
			break
		}
		b.WriteString(strings.TrimSpace(strings.TrimPrefix(l, "//")) + "\n")
	}
	return b.String(), true
}
