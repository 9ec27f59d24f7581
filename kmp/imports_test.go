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

// kmp is a user of alloc: it reaches no further down (internal/heap). It
// calls the hot paths through internal/handles, alloc's own table, only so
// that omp_alloc and omp_free inline into their callers (each is one call
// of the engine there), and reaches what only omp.h needs (allocators by
// handle, omp_realloc into the block's own allocator, the block around an
// interior address) through internal/ompglue, so that alloc's API carries
// none of it.
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
