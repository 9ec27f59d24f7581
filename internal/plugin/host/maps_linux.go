package host

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// scanMaps reads /proc/self/maps and reports how many mappings the process
// has and the first address of [p, end) no mapping covers (hole, or 0). It
// reads through one fixed buffer and parses without allocating per line: it
// runs when mlock failed, perhaps because the process is at
// vm.max_map_count, where a Go allocation needing a new mapping would kill
// the process.
func scanMaps(p, end uintptr) (count int, hole uintptr, ok bool) {
	return scanMapsEach(p, end, nil)
}

// scanMapsEach is scanMaps calling each, if not nil, with the part of every
// mapping that lies in [p, end), in address order.
func scanMapsEach(p, end uintptr, each func(lo, hi uintptr)) (count int, hole uintptr, ok bool) {
	fd, err := syscall.Open("/proc/self/maps", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	defer syscall.Close(fd)
	var buf [1 << 16]byte
	cursor, have := p, 0
	for {
		n, err := syscall.Read(fd, buf[have:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, false
		}
		have += n
		line := 0
		for i := 0; i < have; i++ {
			if buf[i] != '\n' {
				continue
			}
			lo, hi, good := mapRange(buf[line:i])
			line = i + 1
			if !good {
				continue
			}
			count++
			if hi <= cursor || cursor >= end {
				continue
			}
			if lo > cursor && hole == 0 {
				hole = cursor
			}
			if each != nil && lo < end {
				each(max(lo, p), min(hi, end))
			}
			cursor = hi
		}
		if n == 0 {
			break
		}
		have = copy(buf[:], buf[line:have])
		if have == len(buf) {
			return 0, 0, false // a line longer than the buffer: not maps as we know it
		}
	}
	if hole == 0 && cursor < end {
		hole = cursor
	}
	return count, hole, true
}

// mapRange parses the "start-end" that begins a line of /proc/self/maps.
func mapRange(l []byte) (lo, hi uintptr, ok bool) {
	var v [2]uintptr
	k, digits := 0, 0
	for _, c := range l {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c == '-' && k == 0 && digits > 0:
			k, digits = 1, 0
			continue
		default:
			return v[0], v[1], k == 1 && digits > 0
		}
		v[k] = v[k]<<4 | uintptr(d)
		digits++
	}
	return v[0], v[1], k == 1 && digits > 0
}

// maxMapCount is vm.max_map_count.
func maxMapCount() (int, bool) {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}
