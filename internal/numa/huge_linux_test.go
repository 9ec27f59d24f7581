//go:build linux && (amd64 || arm64)

package numa_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

// TestAdviseHugeReachesTheKernel: the mapping's smaps entry carries the
// "hg" flag after AdviseHuge.
func TestAdviseHugeReachesTheKernel(t *testing.T) {
	needMempolicy(t) // qemu-user (CI's arm64 run) answers madvise without doing it
	_, p := mapRange(t, 4<<20)
	if err := numa.AdviseHuge(p, 4<<20); err != nil {
		t.Skipf("no transparent huge pages: %v", err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	start := fmt.Sprintf("%x-", p)
	for i, l := range lines {
		if !strings.HasPrefix(l, start) {
			continue
		}
		for _, m := range lines[i+1:] {
			if f, ok := strings.CutPrefix(m, "VmFlags:"); ok {
				require.Contains(t, strings.Fields(f), "hg")
				return
			}
		}
	}
	t.Fatalf("mapping %#x not in smaps", p)
}
