// Package envsize reads the sizes that ompalloc's OMPALLOC_* environment
// variables take, with one rule for all of them: decimal bytes, or a number
// with one suffix K, M, G or T (powers of 1024), optionally followed by B
// or iB ("65536", "64K", "4MiB", "2 KB", "1g"). OMP_ALLOCATOR's numbers are plain
// bytes instead, as LLVM and libgomp read them (package traits).
package envsize

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Accepted says what Parse accepts, for messages.
const Accepted = "bytes, or a number with one suffix K, M, G or T (powers of 1024), like 65536, 64K or 4G"

var (
	errNotASize = errors.New("not a size: give " + Accepted)
	errTooLarge = fmt.Errorf("too large: the most is %d bytes (8 EiB - 1)", int64(1<<63-1))
)

// Parse reads v. Errors say what was wrong and what is accepted, never the
// internals of strconv; the caller names the setting and the value.
func Parse(v string) (uint64, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	if strings.HasSuffix(t, "IB") {
		t = strings.TrimSuffix(t, "IB")
		if !strings.ContainsAny(t[max(len(t)-1, 0):], "KMGT") {
			return 0, errNotASize
		}
	} else {
		t = strings.TrimSuffix(t, "B")
	}
	shift := 0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = strings.TrimSpace(t[:n-1]) // "2 KB" as well as "2KB"
		}
	}
	if t == "" || strings.TrimLeft(t, "0123456789") != "" {
		return 0, errNotASize
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n > (1<<63-1)>>shift {
		return 0, errTooLarge
	}
	return n << shift, nil
}
