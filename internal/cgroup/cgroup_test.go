package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// tree writes files (path → content) below a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

const (
	v2Mount = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	v1Mount = "25 24 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n" +
		"35 25 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
	mib = 1 << 20
)

func TestMemoryFixtures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		ok    bool
		bytes int64
		file  string // below the root
		ver   int
		usage int64
	}{
		{name: "no cgroup files at all"},
		{name: "v2, max everywhere", files: map[string]string{
			"proc/self/cgroup":    "0::/user.slice/app.service\n",
			"proc/self/mountinfo": v2Mount,
			"sys/fs/cgroup/user.slice/app.service/memory.max":  "max\n",
			"sys/fs/cgroup/user.slice/app.service/memory.high": "max\n",
			"sys/fs/cgroup/user.slice/memory.max":              "max\n",
		}},
		{name: "v2, own memory.max", ok: true, bytes: 256 * mib, file: "sys/fs/cgroup/docker/abc/memory.max", ver: 2, usage: 10 * mib, files: map[string]string{
			"proc/self/cgroup":                        "0::/docker/abc\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup/docker/abc/memory.max":     "268435456\n",
			"sys/fs/cgroup/docker/abc/memory.high":    "max\n",
			"sys/fs/cgroup/docker/abc/memory.current": "10485760\n",
			"sys/fs/cgroup/docker/memory.max":         "max\n",
		}},
		{name: "v2, an ancestor's smaller memory.high binds", ok: true, bytes: 100 * mib, file: "sys/fs/cgroup/kubepods/memory.high", ver: 2, usage: 50 * mib, files: map[string]string{
			"proc/self/cgroup":                            "0::/kubepods/pod1/ctr\n",
			"proc/self/mountinfo":                         v2Mount,
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max":  "1073741824\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":      "536870912\n",
			"sys/fs/cgroup/kubepods/memory.high":          "104857600\n",
			"sys/fs/cgroup/kubepods/memory.max":           "max\n",
			"sys/fs/cgroup/kubepods/memory.current":       "52428800\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.high": "max\n",
		}},
		{name: "v2, cgroup namespace: the mount shows the container's own cgroup as /", ok: true, bytes: 64 * mib, file: "sys/fs/cgroup/memory.max", ver: 2, usage: -1, files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      "30 25 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory.max": "67108864\n",
		}},
		{name: "v2, mount of a subtree holding the cgroup", ok: true, bytes: 32 * mib, file: "mnt/cg/leaf/memory.max", ver: 2, usage: -1, files: map[string]string{
			"proc/self/cgroup":       "0::/sub/leaf\n",
			"proc/self/mountinfo":    "30 25 0:26 /sub /mnt/cg rw - cgroup2 cgroup2 rw\n",
			"mnt/cg/leaf/memory.max": "33554432\n",
			"mnt/cg/memory.max":      "67108864\n",
		}},
		// Issue 29, item 2: the parent's 192 MiB with a sibling holding
		// 120 MiB leaves less than the process's own 160 MiB group: the
		// smallest limit (160 MiB) was taken, and the process OOM-killed.
		{name: "v2, nested: the parent's room, not the smallest limit", ok: true, bytes: 192 * mib, file: "sys/fs/cgroup/parent/memory.max", ver: 2, usage: 126 * mib, files: map[string]string{
			"proc/self/cgroup":                        "0::/parent/own\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup/parent/memory.max":         "201326592\n",
			"sys/fs/cgroup/parent/memory.current":     "132120576\n",
			"sys/fs/cgroup/parent/sibling/memory.max": "max\n",
			"sys/fs/cgroup/parent/own/memory.max":     "167772160\n",
			"sys/fs/cgroup/parent/own/memory.current": "6291456\n",
		}},
		{name: "v2, nested: memory.high's room binds as memory.max's does", ok: true, bytes: 100 * mib, file: "sys/fs/cgroup/parent/own/memory.high", ver: 2, usage: 90 * mib, files: map[string]string{
			"proc/self/cgroup":                        "0::/parent/own\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup/parent/memory.max":         "209715200\n",
			"sys/fs/cgroup/parent/memory.current":     "99614720\n",
			"sys/fs/cgroup/parent/own/memory.max":     "167772160\n",
			"sys/fs/cgroup/parent/own/memory.high":    "104857600\n",
			"sys/fs/cgroup/parent/own/memory.current": "94371840\n",
		}},
		{name: "v2, nested: the parent's memory.high with siblings", ok: true, bytes: 192 * mib, file: "sys/fs/cgroup/parent/memory.high", ver: 2, usage: 126 * mib, files: map[string]string{
			"proc/self/cgroup":                        "0::/parent/own\n",
			"proc/self/mountinfo":                     v2Mount,
			"sys/fs/cgroup/parent/memory.max":         "max\n",
			"sys/fs/cgroup/parent/memory.high":        "201326592\n",
			"sys/fs/cgroup/parent/memory.current":     "132120576\n",
			"sys/fs/cgroup/parent/own/memory.max":     "167772160\n",
			"sys/fs/cgroup/parent/own/memory.current": "6291456\n",
		}},
		{name: "v1, nested: the parent's room, not the smallest limit", ok: true, bytes: 192 * mib, file: "sys/fs/cgroup/memory/parent/memory.limit_in_bytes", ver: 1, usage: 126 * mib, files: map[string]string{
			"proc/self/cgroup":    "4:memory:/parent/own\n",
			"proc/self/mountinfo": v1Mount,
			"sys/fs/cgroup/memory/parent/memory.limit_in_bytes":     "201326592\n",
			"sys/fs/cgroup/memory/parent/memory.usage_in_bytes":     "132120576\n",
			"sys/fs/cgroup/memory/parent/own/memory.limit_in_bytes": "167772160\n",
			"sys/fs/cgroup/memory/parent/own/memory.usage_in_bytes": "6291456\n",
		}},
		{name: "v1 memory controller, nested, unlimited at the top", ok: true, bytes: 256 * mib, file: "sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", ver: 1, usage: 20 * mib, files: map[string]string{
			"proc/self/cgroup":                                           "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n",
			"proc/self/mountinfo":                                        v1Mount,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":     "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": "268435456\n",
			"sys/fs/cgroup/memory/process_api/abc/memory.usage_in_bytes": "20971520\n",
		}},
		{name: "v1, the parent's limit is smaller", ok: true, bytes: 128 * mib, file: "sys/fs/cgroup/memory/a/memory.limit_in_bytes", ver: 1, usage: -1, files: map[string]string{
			"proc/self/cgroup":                               "4:memory:/a/b\n",
			"proc/self/mountinfo":                            v1Mount,
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes":   "134217728\n",
			"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": "268435456\n",
		}},
		{name: "v1 and v2 together: the smaller wins", ok: true, bytes: 200 * mib, file: "sys/fs/cgroup/unified/app/memory.max", ver: 2, usage: -1, files: map[string]string{
			"proc/self/cgroup":                               "4:memory:/app\n0::/app\n",
			"proc/self/mountinfo":                            v1Mount + "41 25 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory/app/memory.limit_in_bytes": "268435456\n",
			"sys/fs/cgroup/unified/app/memory.max":           "209715200\n",
		}},
		{name: "v1 mount without the memory controller is ignored", files: map[string]string{
			"proc/self/cgroup":    "1:cpu,cpuacct:/a\n",
			"proc/self/mountinfo": v1Mount,
			"sys/fs/cgroup/cpu,cpuacct/a/memory.limit_in_bytes": "1048576\n",
		}},
		{name: "garbage in the files", files: map[string]string{
			"proc/self/cgroup":            "0::/x\nnonsense\n",
			"proc/self/mountinfo":         "garbage line\n" + v2Mount,
			"sys/fs/cgroup/x/memory.max":  "lots\n",
			"sys/fs/cgroup/x/memory.high": "-5\n",
			"sys/fs/cgroup/memory.max":    "\n",
		}},
		{name: "escaped mount point", ok: true, bytes: mib, file: "my cg/memory.max", ver: 2, usage: -1, files: map[string]string{
			"proc/self/cgroup":    "0::/\n",
			"proc/self/mountinfo": `30 25 0:26 / /my\040cg rw - cgroup2 cgroup2 rw` + "\n",
			"my cg/memory.max":    "1048576\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			l, ok := MemoryAt(root)
			require.Equal(t, tc.ok, ok, "%+v", l)
			if !tc.ok {
				return
			}
			require.Equal(t, tc.bytes, l.Bytes)
			require.Equal(t, filepath.Join(root, tc.file), l.File)
			require.Equal(t, tc.ver, l.Version)
			require.Equal(t, tc.usage, l.Usage)
			require.Contains(t, l.String(), l.Name())
			require.Equal(t, tc.bytes-max(tc.usage, 0), l.Room())
		})
	}
}

// The machine's own answer never fails; it says what it found.
func TestMemoryHere(t *testing.T) {
	l, ok := Memory()
	if !ok {
		t.Log("no cgroup memory limit on this process")
		return
	}
	require.Positive(t, l.Bytes)
	t.Logf("%v, usage %d", l, l.Usage)
}
