package fakedrv

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDirFindsSources(t *testing.T) {
	src, err := Source("fakecuda")
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(src))
	_, err = os.Stat(src)
	require.NoError(t, err)
}

func TestBuildOnceConcurrently(t *testing.T) {
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			paths[i], _ = BuildPath("fakecuda")
		}(i)
	}
	wg.Wait()
	p := Build(t, "fakecuda")
	for _, q := range paths {
		require.Equal(t, p, q, "one build for every caller")
	}
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.NotZero(t, fi.Size())
}

func TestBuildMissingSource(t *testing.T) {
	if _, err := BuildPath("fakecuda"); err != nil {
		t.Skipf("no compiler: %v", err)
	}
	_, err := BuildPath("no-such-fake")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNoCompiler)
	require.Contains(t, err.Error(), "no-such-fake.c")
}
