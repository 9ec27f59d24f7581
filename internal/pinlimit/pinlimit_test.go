package pinlimit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cgroup"
)

const mib = 1 << 20

func TestDecide(t *testing.T) {
	cg := func(limit, usage int64) cgroup.Limit {
		return cgroup.Limit{Bytes: limit, Usage: usage, Version: 2, File: "/sys/fs/cgroup/x/memory.max"}
	}
	for _, tc := range []struct {
		name   string
		facts  Default
		bytes  int64
		origin Origin
		why    string
		advice string
	}{
		{"nothing binds: half of RAM", Default{Memlock: -1, RAM: 24 << 30}, 12 << 30, RAM, "half of physical memory (24 GiB)", "OMPALLOC_PINNED_LIMIT"},
		{"RLIMIT_MEMLOCK binds", Default{Memlock: 8 * mib, MemlockBinds: true, RAM: 24 << 30}, 8 * mib, Memlock, "RLIMIT_MEMLOCK (8 MiB)", "ulimit -l"},
		{"RLIMIT_MEMLOCK finite but root", Default{Memlock: 8 * mib, RAM: 24 << 30}, 12 << 30, RAM, "half of physical memory", "OMPALLOC_PINNED_LIMIT"},
		// Issue 23, item 1: root in a 256 MiB cgroup was allowed 12 GiB and OOM-killed after 224 MiB.
		{"root in a 256 MiB cgroup", Default{Memlock: -1, RAM: 24 << 30, Cgroup: cg(256*mib, 16*mib), HasCgroup: true}, 128 * mib, Cgroup,
			"half of what the cgroup v2 memory.max of 256 MiB at /sys/fs/cgroup/x/memory.max leaves (16 MiB in use there)", "raise its memory limit"},
		{"a cgroup mostly used already", Default{Memlock: -1, RAM: 24 << 30, Cgroup: cg(256*mib, 200*mib), HasCgroup: true}, 42 * mib, Cgroup, "200 MiB in use", "cgroup"},
		{"a full cgroup still means a limit", Default{Memlock: -1, RAM: 24 << 30, Cgroup: cg(256*mib, 300*mib), HasCgroup: true}, 64 << 10, Cgroup, "cgroup", "cgroup"},
		{"usage unknown", Default{Memlock: -1, RAM: 24 << 30, Cgroup: cg(256*mib, -1), HasCgroup: true}, 128 * mib, Cgroup, "memory.max of 256 MiB", "cgroup"},
		{"RLIMIT_MEMLOCK below the cgroup's share", Default{Memlock: 64 << 10, MemlockBinds: true, RAM: 24 << 30, Cgroup: cg(256*mib, 0), HasCgroup: true}, 64 << 10, Memlock, "RLIMIT_MEMLOCK (64 KiB)", "--ulimit memlock=-1"},
		{"cgroup above RAM: half of RAM", Default{Memlock: -1, RAM: 8 << 30, Cgroup: cg(64<<30, 0), HasCgroup: true}, 4 << 30, RAM, "half of physical memory", "OMPALLOC_PINNED_LIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.facts.decide()
			require.Equal(t, tc.bytes, d.Bytes)
			require.Equal(t, tc.origin, d.Origin)
			require.Contains(t, d.Why(), tc.why)
			require.Contains(t, d.Advice(), tc.advice)
		})
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{65536: "64 KiB", 256 * mib: "256 MiB", 100: "100 bytes", 0: "0 bytes", 3 << 30: "3 GiB", 1 << 40: "1 TiB", 1536: "1.5 KiB", 12345: "12.1 KiB"} {
		require.Equal(t, want, Size(n), n)
	}
}

// The machine's answer is consistent with its facts.
func TestComputeHere(t *testing.T) {
	d := Compute()
	t.Logf("default pinned limit %s: %s; %s", Size(d.Bytes), d.Why(), d.Advice())
	if d.MemlockBinds {
		require.LessOrEqual(t, d.Bytes, d.Memlock)
	}
	if d.HasCgroup {
		require.LessOrEqual(t, d.Bytes, max(d.Cgroup.Bytes/2, minCgroupShare))
	}
}
