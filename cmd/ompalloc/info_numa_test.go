package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

func TestWriteNUMAFixtures(t *testing.T) {
	cases := map[string][]string{
		"xeon-max-flat": {"NUMA nodes (4", "none (memory-only)", "524288 MB/s, 130 ns", "13 23 10 23",
			"high_bw: nodes 2-3: node 2: HMAT read bandwidth", "large_cap: nodes 0-3: no capacity-tier node"},
		"cxl":  {"large_cap: nodes 1: node 1: memory-only, HMAT read bandwidth 51200 MB/s", "22"},
		"none": {"NUMA nodes (1, synthetic: no NUMA information", "huge page sizes: -; transparent huge pages: -"},
		"odd":  {"node 0: odd sysfs: cpulist:"},
		"gh200": {"NUMA nodes (9", "huge page sizes: 2 MiB, 512 MiB; transparent huge pages: always",
			"10 80 80 80 80 80 80 80 80"},
	}
	for name, wants := range cases {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			writeNUMA(&b, numaInfo(numa.Read("../../internal/numa/testdata/"+name)))
			for _, w := range wants {
				require.Contains(t, b.String(), w)
			}
		})
	}
}
