package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Limit is one memory limit of a cgroup of the process.
type Limit struct {
	Bytes   int64  // the limit
	File    string // the file it was read from, below the root asked for
	Version int    // 1 or 2
	Usage   int64  // the usage of that cgroup (memory.current, memory.usage_in_bytes); -1 unknown
}

// Name is the limit's kind and version: "cgroup v2 memory.max".
func (l Limit) Name() string {
	return fmt.Sprintf("cgroup v%d %s", l.Version, filepath.Base(l.File))
}

func (l Limit) String() string {
	return fmt.Sprintf("%s of %d bytes (%s)", l.Name(), l.Bytes, l.File)
}

// unlimited: cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages
// (9223372036854771712 bytes with 4 KiB pages); anything this large is none.
const unlimited = 1 << 62

// Room is what the limit leaves: Bytes less Usage (Bytes when the usage is
// unknown), never below zero. A cgroup's usage counts its whole subtree, so
// at an ancestor it holds what sibling groups use too.
func (l Limit) Room() int64 {
	return max(l.Bytes-max(l.Usage, 0), 0)
}

// Memory returns the memory limit on this process that leaves it the least
// room: ok is false when no cgroup limits it. It reads the files each time
// (limits and usage change at run time).
func Memory() (Limit, bool) { return MemoryAt("/") }

// MemoryAt is Memory for the tree below root: root/proc/self/cgroup,
// root/proc/self/mountinfo, and the mount points they name, below root.
//
// Every level binds: the process's own cgroup and each ancestor, each with
// memory.max and memory.high (v2) or memory.limit_in_bytes (v1). The one
// returned is the least room (limit less that level's usage), not the
// smallest limit: a parent of 192 MiB whose other child holds 120 MiB
// leaves 72 MiB, whatever the process's own 160 MiB says. Ties go to the
// smaller limit.
func MemoryAt(root string) (Limit, bool) {
	groups := readGroups(filepath.Join(root, "proc/self/cgroup"))
	var best Limit
	found := false
	for _, m := range readMounts(filepath.Join(root, "proc/self/mountinfo")) {
		var cg string
		var ok bool
		if m.version == 2 {
			cg, ok = groups.v2, groups.hasV2
		} else {
			cg, ok = groups.memoryV1, groups.hasV1
		}
		if !ok {
			continue
		}
		for _, l := range limitsOf(root, m, cg) {
			if !found || l.Room() < best.Room() || l.Room() == best.Room() && l.Bytes < best.Bytes {
				best, found = l, true
			}
		}
	}
	return best, found
}

type groups struct {
	v2, memoryV1 string
	hasV2, hasV1 bool
}

// readGroups reads /proc/self/cgroup: "0::/path" for v2,
// "N:memory,...:/path" for the v1 memory controller.
func readGroups(file string) groups {
	var g groups
	b, err := os.ReadFile(file)
	if err != nil {
		return g
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			g.v2, g.hasV2 = f[2], true
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			if c == "memory" {
				g.memoryV1, g.hasV1 = f[2], true
			}
		}
	}
	return g
}

type mount struct {
	root, point string // the cgroup the mount shows, and where
	version     int
}

// readMounts finds the cgroup v2 mounts and the v1 mounts of the memory
// controller in mountinfo ("ID PARENT MAJ:MIN ROOT POINT OPTS... - TYPE
// SOURCE SUPEROPTS").
func readMounts(file string) []mount {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 1 {
			continue
		}
		m := mount{root: unescape(a[3]), point: unescape(a[4])}
		switch b[0] {
		case "cgroup2":
			m.version = 2
		case "cgroup":
			if len(b) < 3 || !hasOpt(b[2], "memory") {
				continue
			}
			m.version = 1
		default:
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// limitsOf reads the limits of cgroup cg and its ancestors through mount m.
// A cgroup outside what the mount shows (another cgroup namespace's view)
// is read at the mount's top only.
func limitsOf(root string, m mount, cg string) []Limit {
	r, c := path.Clean(m.root), path.Clean(cg)
	var rel string
	switch {
	case r == "/":
		rel = c
	case strings.HasPrefix(c, r+"/"):
		rel = c[len(r):]
	} // else c is the mount's root, or outside it: its top only
	top := filepath.Join(root, m.point)
	dir := filepath.Join(top, filepath.FromSlash(rel))
	files := []string{"memory.max", "memory.high"}
	usage := "memory.current"
	if m.version == 1 {
		files, usage = []string{"memory.limit_in_bytes"}, "memory.usage_in_bytes"
	}
	var ls []Limit
	for {
		for _, name := range files {
			if n, ok := readBytes(filepath.Join(dir, name)); ok {
				u, ok := readBytes(filepath.Join(dir, usage))
				if !ok {
					u = -1
				}
				ls = append(ls, Limit{Bytes: n, File: filepath.Join(dir, name), Version: m.version, Usage: u})
			}
		}
		if len(dir) <= len(top) {
			return ls
		}
		dir = filepath.Dir(dir)
	}
}

// readBytes reads a limit file: a number of bytes, or "max"/a huge number
// for none (ok false).
func readBytes(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= unlimited {
		return 0, false
	}
	return int64(n), true
}
