package kmp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kmp is a user of alloc like any other: it reaches no further down
// (internal/heap), so what it does a Go program can do too. (It calls the
// hot paths through internal/handles, alloc's own table, only so that
// omp_alloc and omp_free inline into their callers: each is one call of
// the engine there.)
func TestKmpGoesThroughAlloc(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, im := range af.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			require.NotEqual(t, "github.com/ompalloc/ompalloc/internal/heap", path, "%s imports internal/heap", f)
		}
	}
}
