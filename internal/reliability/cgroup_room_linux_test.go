package reliability

import (
	"bufio"
	"fmt"
	"io"
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
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// Issue 29, items 2 and 4, with real groups: a parent of 192 MiB whose
// other child holds 120 MiB, the process's own group at 160 MiB. The
// default pinned limit was half the smallest limit on the path (80 MiB),
// and the process was OOM-killed after pinning 68 MiB. It now follows the
// least room (the parent's 192 MiB less what its subtree uses): the child
// pins until refused with an error naming the cgroup, and the child and
// the holder both live. cgroup v2 where a cgroup2 mount has the memory
// controller (the NUMA guest of CI mounts one), else v1 below this
// process's own memory cgroup; skipped with the reason where neither can be
// written.
func TestCgroupNestedRoom(t *testing.T) {
	base, version := cgroupBase(t)
	parent := makeGroup(t, base, fmt.Sprintf("ompalloc-nested-%d", os.Getpid()), version, 192<<20)
	sibling := makeGroup(t, parent, "sibling", version, 0)
	own := makeGroup(t, parent, "own", version, 160<<20)

	holder := startInGroup(t, sibling, version, "TestCgroupHoldChild", "OMPALLOC_CGROUP_HOLD=120")
	readUntil(t, holder, "HELD")
	pin := startInGroup(t, own, version, "TestCgroupPinUntilRefusedChild")
	out := waitChild(t, pin)
	limit, pinned := figure(out, "LIMIT "), figure(out, "PINNED ")
	t.Logf("cgroup v%d: parent 192 MiB, sibling holding 120 MiB, own 160 MiB: default pinned limit %d MiB, pinned %d MiB before a refusal", version, limit>>20, pinned>>20)
	require.Contains(t, out, "--- PASS: TestCgroupPinUntilRefusedChild", out)
	require.Less(t, limit, 72<<20, "below the parent's room, not half of the own group's 160 MiB")
	require.Positive(t, pinned)
	require.Less(t, pinned, 72<<20)
	require.NoError(t, holder.cmd.Process.Signal(syscall.Signal(0)), "the holder lives")
}

// Issue 29, items 3 and 4, with a real group: its limit lowered from
// 512 MiB to 128 MiB while the child runs (after it read its default
// limit, 256 MiB); the child was OOM-killed after 120 MiB. It now takes
// the room again at each chunk and is refused with an error instead.
func TestCgroupLimitLoweredWhileRunning(t *testing.T) {
	base, version := cgroupBase(t)
	g := makeGroup(t, base, fmt.Sprintf("ompalloc-lowered-%d", os.Getpid()), version, 512<<20)
	c := startInGroup(t, g, version, "TestCgroupPinUntilRefusedChild", "OMPALLOC_CGROUP_WAIT=1")
	readUntil(t, c, "READY")
	setLimit(t, g, version, 128<<20)
	_, err := io.WriteString(c.stdin, "go\n")
	require.NoError(t, err)
	out := waitChild(t, c)
	limit, pinned := figure(out, "LIMIT "), figure(out, "PINNED ")
	t.Logf("cgroup v%d lowered from 512 to 128 MiB: the limit read at start %d MiB, pinned %d MiB before a refusal", version, limit>>20, pinned>>20)
	require.Contains(t, out, "--- PASS: TestCgroupPinUntilRefusedChild", out)
	require.Greater(t, limit, 128<<20, "the limit was read before the cgroup was lowered")
	require.Positive(t, pinned)
	require.LessOrEqual(t, pinned, 64<<20, "half the lowered limit at most")
}

// TestCgroupHoldChild holds OMPALLOC_CGROUP_HOLD MiB of touched memory in
// its cgroup until its stdin closes.
func TestCgroupHoldChild(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("OMPALLOC_CGROUP_HOLD"))
	if mib == 0 {
		t.Skip("run by TestCgroupNestedRoom in a cgroup of its own")
	}
	waitInGroup(t)
	b, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_POPULATE)
	require.NoError(t, err)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("HELD")
	_, _ = io.Copy(io.Discard, os.Stdin)
	require.NoError(t, syscall.Munmap(b))
}

// TestCgroupPinUntilRefusedChild pins 4 MiB blocks until refused, in the
// cgroup it was started in (after a line on stdin with
// OMPALLOC_CGROUP_WAIT), and prints its default limit and what it pinned.
func TestCgroupPinUntilRefusedChild(t *testing.T) {
	if os.Getenv("OMPALLOC_CGROUP_IN") == "" {
		t.Skip("run by the cgroup tests in a cgroup of its own")
	}
	waitInGroup(t)
	max := alloc.ReadPinnedStats().Limit
	fmt.Printf("LIMIT %d\n", max)
	if os.Getenv("OMPALLOC_CGROUP_WAIT") != "" {
		fmt.Println("READY")
		_, err := bufio.NewReader(os.Stdin).ReadString('\n')
		require.NoError(t, err)
	}
	a, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
	require.NoError(t, err)
	var held []unsafe.Pointer
	pinned := 0
	for range 1024 {
		p, err := a.Alloc(4 << 20)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrPinFailed)
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

// waitInGroup waits until the process is in the cgroup OMPALLOC_CGROUP_IN
// names (v1: the parent moves it after the start).
func waitInGroup(t *testing.T) {
	want := os.Getenv("OMPALLOC_CGROUP_IN")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/self/cgroup")
		if strings.Contains(string(b), want+"\n") {
			return
		}
		require.True(t, time.Now().Before(deadline), "not in %s after 10 s: %s", want, b)
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroupBase is where test groups go: the root of a cgroup2 mount with the
// memory controller (enabled for its children), else this process's own v1
// memory cgroup. It skips, saying why, where there is none, and where
// RLIMIT_MEMLOCK would bind instead of the cgroup.
func cgroupBase(t *testing.T) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 || !procstatus.HasCapIPCLock() {
		t.Skip("needs root with CAP_IPC_LOCK: to make cgroups, and so that RLIMIT_MEMLOCK does not bind (the case of the issue)")
	}
	if why, ok := testenv.Emulated(); ok {
		t.Skip(why + ": the cgroup would be charged for it")
	}
	var reasons []string
	for _, m := range readMountinfo() {
		if m.fstype != "cgroup2" {
			continue
		}
		ctl, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
		if err != nil || !hasWord(string(ctl), "memory") {
			reasons = append(reasons, fmt.Sprintf("the cgroup2 mount %s has no memory controller (%q: it is bound to v1)", m.point, strings.TrimSpace(string(ctl))))
			continue
		}
		if err := os.WriteFile(filepath.Join(m.point, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			reasons = append(reasons, fmt.Sprintf("cannot enable memory below %s: %v", m.point, err))
			continue
		}
		return m.point, 2
	}
	for _, m := range readMountinfo() {
		if m.fstype == "cgroup" && hasOpt(m.opts, "memory") {
			d := filepath.Join(m.point, ownV1MemoryCgroup())
			if b, err := os.ReadFile(filepath.Join(d, "memory.use_hierarchy")); err == nil && strings.TrimSpace(string(b)) != "1" {
				reasons = append(reasons, d+" does not account its children hierarchically (memory.use_hierarchy 0)")
				continue
			}
			return d, 1
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no cgroup2 mount and no v1 memory controller in /proc/self/mountinfo")
	}
	t.Skip("no writable memory cgroup: " + strings.Join(reasons, "; "))
	return "", 0
}

// makeGroup makes cgroup parent/name with a memory limit (0: none),
// removed at cleanup. v2: the parent gives its children the memory
// controller first; a group that does so may hold no process (no internal
// processes: CLONE_INTO_CGROUP into it is EBUSY), so leaves never do.
func makeGroup(t *testing.T, parent, name string, version int, limit int64) string {
	t.Helper()
	if version == 2 {
		require.NoError(t, os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0))
	}
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Skipf("cannot make a cgroup below %s: %v", parent, err)
	}
	t.Cleanup(func() { removeCgroup(t, d) })
	if version == 2 {
		_ = os.WriteFile(filepath.Join(d, "memory.swap.max"), []byte("0"), 0) // locked pages never swap; the rest must not either
	}
	if limit > 0 {
		setLimit(t, d, version, limit)
	}
	return d
}

// setLimit sets d's memory limit (v2 memory.max; v1 memory.limit_in_bytes
// and the memory+swap limit, in the order the kernel accepts).
func setLimit(t *testing.T, d string, version int, limit int64) {
	t.Helper()
	v := []byte(strconv.FormatInt(limit, 10))
	if version == 2 {
		require.NoError(t, os.WriteFile(filepath.Join(d, "memory.max"), v, 0))
		return
	}
	mem, memsw := filepath.Join(d, "memory.limit_in_bytes"), filepath.Join(d, "memory.memsw.limit_in_bytes")
	if err := os.WriteFile(mem, v, 0); err != nil {
		_ = os.WriteFile(memsw, v, 0) // raising: memory+swap first
		require.NoError(t, os.WriteFile(mem, v, 0))
	}
	_ = os.WriteFile(memsw, v, 0)
}

type groupChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	seen  strings.Builder
}

// startInGroup starts the test child in cgroup dir (v2: CLONE_INTO_CGROUP;
// v1: moved after the start, the child waits for it). The child's stdin
// closes, and it is killed, at cleanup.
func startInGroup(t *testing.T, dir string, version int, child string, env ...string) *groupChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v", "-test.count=1")
	rel := dir[strings.Index(dir, "/ompalloc-"):]
	cmd.Env = append(append(childEnviron(), "OMPALLOC_CGROUP_IN="+rel, envvar.PinnedLimit+"="), env...)
	if version == 2 {
		fd, err := os.Open(dir)
		require.NoError(t, err)
		defer fd.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	}
	c := &groupChild{cmd: cmd}
	var err error
	c.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	c.out = bufio.NewReader(pr)
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		c.stdin.Close()
		_ = cmd.Process.Kill()
		_, _ = io.Copy(io.Discard, pr)
	})
	if version == 1 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0))
	}
	return c
}

// readUntil reads the child's output up to a line saying what.
func readUntil(t *testing.T, c *groupChild, what string) {
	t.Helper()
	for {
		line, err := c.out.ReadString('\n')
		c.seen.WriteString(line)
		if strings.TrimSpace(line) == what {
			return
		}
		require.NoError(t, err, "the child ended before %s:\n%s", what, c.seen.String())
	}
}

// waitChild reads the child's output to its end and requires that it was
// not killed (the OOM killer's SIGKILL: it pinned past its cgroup).
func waitChild(t *testing.T, c *groupChild) string {
	t.Helper()
	rest, _ := io.ReadAll(c.out)
	c.seen.Write(rest)
	out := c.seen.String()
	for c.cmd.ProcessState == nil {
		time.Sleep(time.Millisecond) // Wait runs in its goroutine; the pipe closes after it
	}
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("the child was killed by %v (the OOM killer: it pinned past its cgroup):\n%s", ws.Signal(), out)
	}
	require.True(t, c.cmd.ProcessState.Success(), "%s", out)
	return out
}

// figure reads the number after prefix in the child's output (-1: none).
func figure(out, prefix string) int {
	n := -1
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}
