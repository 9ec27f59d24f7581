package procstatus

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFields(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, ok := VmLckKiB()
		require.False(t, ok)
		return
	}
	rss, ok := VmRSSKiB()
	require.True(t, ok)
	require.Greater(t, rss, 0)
	_, ok = VmLckKiB()
	require.True(t, ok)
	_, ok = Field("NoSuchField")
	require.False(t, ok)
	_, ok = Field("CapEff")
	require.True(t, ok)
	_, ok = HugetlbKiB()
	require.True(t, ok, "HugetlbPages (Linux 4.4 and later)")
}
