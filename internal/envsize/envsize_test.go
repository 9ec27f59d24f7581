package envsize

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0", 0}, {"65536", 65536}, {" 64K ", 64 << 10}, {"64k", 64 << 10}, {"4M", 4 << 20}, {"4MB", 4 << 20},
		{"4MiB", 4 << 20}, {"1g", 1 << 30}, {"2T", 2 << 40}, {"100B", 100}, {"8388607T", 8388607 << 40}, {" 2 KB ", 2048},
	} {
		got, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, tc := range []struct{ in, says string }{
		{"banana", `not a size: give bytes, or a number with one suffix K, M, G or T`},
		{"1KM", "not a size"}, {"-1", "not a size"}, {"+4K", "not a size"}, {"", "not a size"},
		{"K", "not a size"}, {"4 4K", "not a size"}, {"1.5G", "not a size"}, {"4iB", "not a size"},
		{"16777216T", "too large: the most is 9223372036854775807 bytes"}, {"99999999999999999999", "too large"},
	} {
		_, err := Parse(tc.in)
		require.ErrorContains(t, err, tc.says, tc.in)
		require.NotContains(t, err.Error(), "strconv", tc.in)
	}
}
