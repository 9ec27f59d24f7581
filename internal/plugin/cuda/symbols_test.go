package cuda

import (
	"bufio"
	_ "embed"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// libcudaSymbols is testdata/libcuda.symbols, embedded so that the test
// binary runs from any directory (scripts/gpu-check.sh's bundle).
//
//go:embed testdata/libcuda.symbols
var libcudaSymbols string

// realSymbols reads testdata/libcuda.symbols, the exports of Debian's libcuda1.
func realSymbols(t *testing.T) map[string]bool {
	syms := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(libcudaSymbols))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			syms[l] = true
		}
	}
	require.NoError(t, sc.Err())
	require.Greater(t, len(syms), 500, "the list looks truncated")
	return syms
}

// boundName is the name a table entry binds in a complete driver.
func boundName(e entry) string {
	if len(e.Versions) > 0 {
		return e.Name + e.Versions[0]
	}
	return e.Name
}

func TestSymbolsExistInRealDriver(t *testing.T) {
	syms := realSymbols(t)
	table := (&driver{}).table()
	require.NotEmpty(t, table)
	for _, e := range table {
		require.True(t, syms[boundName(e)], "%s is not exported by the real libcuda.so.1", boundName(e))
		if e.strict {
			require.True(t, syms[e.Name], "%s: a strict entry has an unversioned twin in the real driver", e.Name)
		}
	}
}
