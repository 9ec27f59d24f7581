package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 23, items 1 and 2: `ompalloc info` says where the pinned-bytes
// limit came from, and warns when it is below one pinned chunk (Docker's
// 64 KiB `ulimit -l`), with what raises it.
func TestInfoPinnedLimitSource(t *testing.T) {
	rep, _ := infoJSON(t, "OMPALLOC_PINNED_LIMIT=")
	require.Contains(t, rep.Pinned.Source, "default: ")
	require.Contains(t, rep.Pinned.Source, "OMPALLOC_PINNED_LIMIT overrides")

	rep, _ = infoJSON(t, "OMPALLOC_PINNED_LIMIT=8M")
	require.Equal(t, "OMPALLOC_PINNED_LIMIT=8M", rep.Pinned.Source)
	require.Empty(t, rep.Pinned.Warning)

	rep, _ = infoJSON(t, "OMPALLOC_PINNED_LIMIT=64K")
	require.Contains(t, rep.Pinned.Warning, "the limit (64 KiB) is below one pinned chunk (4 MiB)")
	require.Contains(t, rep.Pinned.Warning, "raise OMPALLOC_PINNED_LIMIT")

	if runtime.GOOS != "linux" {
		t.Skip("setpriv and prlimit are Linux tools")
	}
	prefix := []string{"prlimit", "--memlock=65536:65536"}
	if os.Geteuid() == 0 {
		prefix = append([]string{"setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"}, prefix...)
	}
	for _, tool := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (util-linux)", tool)
		}
	}
	cmd := exec.Command(prefix[0], append(prefix[1:], binary(t), "info", "--json")...)
	cmd.Env = append(os.Environ(), "OMPALLOC_PINNED_LIMIT=")
	out, err := cmd.Output()
	if err != nil && strings.Contains(string(out), "setpriv:") {
		t.Skipf("setpriv cannot drop CAP_IPC_LOCK here: %s", out)
	}
	require.NoError(t, err, "%s", out)
	var r InfoReport
	require.NoError(t, json.Unmarshal(out, &r))
	require.Contains(t, r.Pinned.Source, "default: RLIMIT_MEMLOCK (64 KiB)")
	require.Contains(t, r.Pinned.Warning, "below one pinned chunk")
	require.Contains(t, r.Pinned.Warning, "ulimit -l")
	require.Contains(t, r.Pinned.Warning, "--ulimit memlock=-1")
}
