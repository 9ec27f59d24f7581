package reliability

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cgroup"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

const cgroupLimit = 256 << 20

// Issue 23, item 1: in a memory cgroup of 256 MiB where RLIMIT_MEMLOCK does
// not bind (root with CAP_IPC_LOCK, as GPU containers run), the default
// pinned-bytes limit was half of the host's RAM: pinning ran into the
// cgroup and the OOM killer killed the process (after 224 MiB in the
// issue). A child is put in a new cgroup with memory.max (v2) or
// memory.limit_in_bytes (v1) of 256 MiB and pins 4 MiB blocks until
// refused: it must get a failed pin naming the cgroup, and live.
func TestCgroupPinLimit(t *testing.T) {
	if os.Geteuid() != 0 || !procstatus.HasCapIPCLock() {
		t.Skip("needs root with CAP_IPC_LOCK: to make a cgroup, and so that RLIMIT_MEMLOCK does not bind (the case of the issue)")
	}
	if why, ok := testenv.Emulated(); ok {
		t.Skip(why + ": the cgroup would be charged for it")
	}
	dir, version, why := newMemoryCgroup(t)
	if dir == "" {
		t.Skip(why)
	}
	t.Logf("cgroup v%d %s with a %d-byte limit", version, dir, cgroupLimit)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCgroupPinChild$", "-test.v", "-test.count=1")
	cmd.Env = append(childEnviron(), "OMPALLOC_CGROUP_CHILD="+dir, envvar.PinnedLimit+"=")
	var fd *os.File
	if version == 2 {
		var err error
		fd, err = os.Open(dir)
		require.NoError(t, err)
		defer fd.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	if version == 1 {
		// v1 has no CLONE_INTO_CGROUP: move it; it waits until it is there.
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0))
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("the child was killed by %v (the OOM killer: it pinned past its cgroup):\n%s", ws.Signal(), out.String())
	}
	require.NoError(t, err, "%s", out.String())
	require.Contains(t, out.String(), "--- PASS: TestCgroupPinChild", out.String())
	pinned := -1
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PINNED "); ok {
			pinned, _ = strconv.Atoi(v)
		}
	}
	t.Logf("the child pinned %d MiB before a failed pin", pinned>>20)
	require.Positive(t, pinned, "it pinned something")
	require.LessOrEqual(t, pinned, cgroupLimit/2, "at most half the cgroup")
}

func TestCgroupPinChild(t *testing.T) {
	dir := os.Getenv("OMPALLOC_CGROUP_CHILD")
	if dir == "" {
		t.Skip("run by TestCgroupPinLimit in a cgroup of its own")
	}
	// v1: wait until the parent moved us (v2 starts here).
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, ok := cgroup.Memory()
		if ok && l.Bytes == cgroupLimit {
			break
		}
		require.True(t, time.Now().Before(deadline), "not in the cgroup after 10 s: %+v %v", l, ok)
		time.Sleep(10 * time.Millisecond)
	}
	max := alloc.ReadPinnedStats().Limit
	fmt.Printf("LIMIT %d\n", max)
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	var held []unsafe.Pointer
	pinned := 0
	for range 1024 { // 4 GiB at most: far past the cgroup without a limit
		p, err := a.Alloc(4 << 20)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrPinFailed)
			require.ErrorContains(t, err, "memory")
			require.ErrorContains(t, err, "cgroup v")
			require.ErrorContains(t, err, "raise its memory limit")
			t.Log(err)
			break
		}
		held = append(held, p)
		pinned += 4 << 20
	}
	fmt.Printf("PINNED %d\n", pinned)
	for _, p := range held {
		require.NoError(t, alloc.Free(p))
	}
	require.NoError(t, a.Destroy())
	alloc.Trim()
}

// newMemoryCgroup makes a cgroup with a memory limit of cgroupLimit below a
// writable hierarchy, removed at cleanup: v2 below the root of a cgroup2
// mount whose memory controller is available, else v1 below this process's
// own memory cgroup. It returns "" and why where there is none.
func newMemoryCgroup(t *testing.T) (dir string, version int, why string) {
	mounts := readMountinfo()
	name := fmt.Sprintf("ompalloc-test-%d", os.Getpid())
	var reasons []string
	for _, m := range mounts {
		if m.fstype != "cgroup2" {
			continue
		}
		ctl, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
		if err != nil || !hasWord(string(ctl), "memory") {
			reasons = append(reasons, fmt.Sprintf("the cgroup2 mount %s has no memory controller (%q: it is bound to v1)", m.point, strings.TrimSpace(string(ctl))))
			continue
		}
		sub, _ := os.ReadFile(filepath.Join(m.point, "cgroup.subtree_control"))
		if !hasWord(string(sub), "memory") {
			if err := os.WriteFile(filepath.Join(m.point, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				reasons = append(reasons, fmt.Sprintf("cannot enable memory below %s: %v", m.point, err))
				continue
			}
		}
		d := filepath.Join(m.point, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			reasons = append(reasons, fmt.Sprintf("cannot make a cgroup below %s: %v", m.point, err))
			continue
		}
		t.Cleanup(func() { removeCgroup(t, d) })
		if err := os.WriteFile(filepath.Join(d, "memory.max"), []byte(strconv.Itoa(cgroupLimit)), 0); err != nil {
			reasons = append(reasons, fmt.Sprintf("cannot set %s/memory.max: %v", d, err))
			continue
		}
		_ = os.WriteFile(filepath.Join(d, "memory.swap.max"), []byte("0"), 0) // locked pages never swap; the rest must not either
		return d, 2, ""
	}
	for _, m := range mounts {
		if m.fstype != "cgroup" || !hasOpt(m.opts, "memory") {
			continue
		}
		own := ownV1MemoryCgroup()
		d := filepath.Join(m.point, own, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			reasons = append(reasons, fmt.Sprintf("cannot make a v1 memory cgroup below %s: %v", filepath.Dir(d), err))
			continue
		}
		t.Cleanup(func() { removeCgroup(t, d) })
		if err := os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), []byte(strconv.Itoa(cgroupLimit)), 0); err != nil {
			reasons = append(reasons, fmt.Sprintf("cannot set %s/memory.limit_in_bytes: %v", d, err))
			continue
		}
		_ = os.WriteFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), []byte(strconv.Itoa(cgroupLimit)), 0)
		return d, 1, ""
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no cgroup2 mount and no v1 memory controller in /proc/self/mountinfo")
	}
	return "", 0, "no writable memory cgroup: " + strings.Join(reasons, "; ")
}

// removeCgroup removes a test cgroup once its processes are gone.
func removeCgroup(t *testing.T, d string) {
	var err error
	for range 100 {
		if err = os.Remove(d); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("cannot remove the test cgroup %s: %v", d, err)
}

type mountEntry struct{ point, fstype, opts string }

func readMountinfo() []mountEntry {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mountEntry
	for line := range strings.SplitSeq(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		a, p := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(p) < 3 {
			continue
		}
		ms = append(ms, mountEntry{point: a[4], fstype: p[0], opts: p[2]})
	}
	return ms
}

func ownV1MemoryCgroup() string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && hasOpt(f[1], "memory") {
			return f[2]
		}
	}
	return "/"
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func hasOpt(opts, w string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == w {
			return true
		}
	}
	return false
}
