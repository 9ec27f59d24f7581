package main

import (
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// TestMain removes the user's OMP_* and OMPALLOC_* settings (testenv).
func TestMain(m *testing.M) {
	testenv.Neutralize()
	m.Run()
}

// TestCases runs every case natively for a few operations, as run.sh runs
// it under cachegrind: each must set up, run and clean up without an error.
func TestCases(t *testing.T) {
	for _, name := range []string{"default-64", "align64-64", "default-4MiB", "pinned-64MiB", "lock-hit"} {
		t.Run(name, func(t *testing.T) {
			c, err := newCase(name, 100)
			if err != nil && name == "pinned-64MiB" {
				t.Skipf("no pinned allocator here: %v", err)
			}
			require.NoError(t, err)
			t.Cleanup(c.done)
			err = c.op(50)
			if err != nil && name == "pinned-64MiB" {
				t.Skipf("64 MiB cannot be pinned here: %v", err)
			}
			require.NoError(t, err)
		})
	}
}

// TestRunArguments: bad arguments give exit status 2, a good run 0.
func TestRunArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-case", "default-64", "-n", "10"}, 0},
		{[]string{"-case", "default-64", "-n", "10", "-time", "-runs", "2"}, 0},
		{[]string{"-case", "no-such-case", "-n", "10"}, 2},
		{[]string{"-case", "default-64", "-n", "0"}, 2},
		{[]string{"-bogus"}, 2},
	} {
		require.Equal(t, tc.want, run(tc.args), "%v", tc.args)
	}
}
