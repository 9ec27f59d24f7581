package pinlimit

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/cgroup"
)

// Origin is the limit a default came from.
type Origin int

const (
	None    Origin = iota // no limit (darwin with an unlimited RLIMIT_MEMLOCK)
	Memlock               // RLIMIT_MEMLOCK, which binds
	Cgroup                // half the room of the process's memory cgroup
	RAM                   // half of physical memory
)

// Default is the default pinned-bytes limit and why.
type Default struct {
	Bytes  int64 // 0: no limit
	Origin Origin

	Memlock      int64 // soft RLIMIT_MEMLOCK; -1: unlimited or unknown
	MemlockBinds bool  // finite, and the process lacks CAP_IPC_LOCK
	Cgroup       cgroup.Limit
	HasCgroup    bool
	RAM          int64 // physical memory; 0 unknown
}

// minCgroupShare keeps a cgroup-derived limit above zero (which would mean
// no limit): one 64 KiB page of a pinned chunk.
const minCgroupShare = 64 << 10

// CgroupShare is what a cgroup limit leaves for pinned memory: half the
// limit, and no more than three quarters of what its usage leaves.
func CgroupShare(l cgroup.Limit) int64 {
	n := l.Bytes / 2
	if l.Usage >= 0 {
		n = min(n, (l.Bytes-l.Usage)/4*3)
	}
	return max(n, minCgroupShare)
}

// ShareNow is CgroupShare taken again while the process runs, with pinned
// bytes already locked: locked pages are charged to the cgroup, so the
// room they took is counted back, and the answer is the total the process
// may have pinned now. At the start (pinned 0) it is CgroupShare without
// its floor; when the limit was lowered, or the rest of the process or a
// sibling group grew, it is less.
func ShareNow(l cgroup.Limit, pinned int64) int64 {
	n := l.Bytes / 2
	if l.Usage >= 0 {
		n = min(n, (l.Room()+pinned)/4*3)
	}
	return n
}

// decide picks the default from the facts in d (tests call it with made-up
// ones; Compute reads the machine's).
func (d Default) decide() Default {
	d.Bytes, d.Origin = 0, None
	if d.MemlockBinds {
		d.Bytes, d.Origin = d.Memlock, Memlock
	} else if d.RAM > 0 && ramLimited {
		d.Bytes, d.Origin = d.RAM/2, RAM
	}
	if d.HasCgroup {
		if c := CgroupShare(d.Cgroup); d.Origin == None || c < d.Bytes {
			d.Bytes, d.Origin = c, Cgroup
		}
	}
	return d
}

// Compute reads RLIMIT_MEMLOCK, CAP_IPC_LOCK, the cgroup and physical
// memory, and decides.
func Compute() Default {
	d := facts()
	d.Cgroup, d.HasCgroup = cgroup.Memory()
	return d.decide()
}

// Why says where the limit came from, as a phrase: "RLIMIT_MEMLOCK (64 KiB)".
func (d Default) Why() string {
	switch d.Origin {
	case Memlock:
		return fmt.Sprintf("RLIMIT_MEMLOCK (%s)", Size(d.Memlock))
	case Cgroup:
		s := fmt.Sprintf("half of what the %s of %s at %s leaves", d.Cgroup.Name(), Size(d.Cgroup.Bytes), d.Cgroup.File)
		if d.Cgroup.Usage >= 0 {
			s += fmt.Sprintf(" (%s in use there)", Size(d.Cgroup.Usage))
		}
		return s
	case RAM:
		return fmt.Sprintf("half of physical memory (%s)", Size(d.RAM))
	}
	return "no limit"
}

// Advice says what raises the limit that binds.
func (d Default) Advice() string {
	switch d.Origin {
	case Memlock:
		return "raise RLIMIT_MEMLOCK with `ulimit -l`, `docker run --ulimit memlock=-1` or `LimitMEMLOCK=` in a systemd unit"
	case Cgroup:
		return "locked memory counts against the cgroup and cannot be reclaimed: raise its memory limit, or set OMPALLOC_PINNED_LIMIT below it"
	}
	return "set OMPALLOC_PINNED_LIMIT to change it"
}

// Size writes n bytes in the largest binary unit it reaches, exactly
// where the unit divides it: "64 KiB", "256 MiB", "23.5 GiB", "100 bytes".
func Size(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			if n%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", n>>u.shift, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int64(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
