package host

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPageCountsRuns(t *testing.T) {
	type op struct {
		first, end uintptr
		delta      int
		want       []pageRun
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"lock then unlock", []op{
			{10, 13, +1, []pageRun{{10, 13}}},
			{10, 13, -1, []pageRun{{10, 13}}},
		}},
		{"shared page stays locked", []op{
			{0, 2, +1, []pageRun{{0, 2}}},
			{1, 3, +1, []pageRun{{2, 3}}},
			{0, 2, -1, []pageRun{{0, 1}}},
			{1, 3, -1, []pageRun{{1, 3}}},
		}},
		{"hole in the middle gives two runs", []op{
			{5, 6, +1, []pageRun{{5, 6}}},
			{3, 9, +1, []pageRun{{3, 5}, {6, 9}}},
			{3, 9, -1, []pageRun{{3, 5}, {6, 9}}},
			{5, 6, -1, []pageRun{{5, 6}}},
		}},
		{"across chunk boundary", []op{
			{chunkPages - 2, chunkPages + 3, +1, []pageRun{{chunkPages - 2, chunkPages + 3}}},
			{chunkPages - 2, chunkPages + 3, -1, []pageRun{{chunkPages - 2, chunkPages + 3}}},
		}},
		{"uncounting what is not counted reports nothing", []op{
			{7, 9, -1, nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pc pageCounts
			for i, o := range tt.ops {
				require.Equal(t, o.want, pc.add(o.first, o.end, o.delta, nil), "op %d", i)
			}
			require.Empty(t, pc.chunks, "every chunk is dropped once its counts are zero")
		})
	}
}
