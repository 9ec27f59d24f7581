package ascii

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLower(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"OMP_ATK_Pool_Size":     "omp_atk_pool_size",
		"omp_default_mem_space": "omp_default_mem_space",
		"\u212a":                "\u212a", // the Kelvin sign stays: no Unicode folding
		"Ä@[`{Z":                "Ä@[`{z",
	} {
		require.Equal(t, want, Lower(in), "%q", in)
	}
}
