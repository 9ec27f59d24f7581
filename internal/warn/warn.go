// Package warn is where every package of this module sends its warnings:
// one line on stderr by default ("ompalloc: warning: ..."), or the
// *slog.Logger the user gave package logging. It is the plumbing behind
// logging.SetLogger; users never import it.
package warn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The kinds of warning, the value of the "kind" attribute of each record
// (package logging documents them).
const (
	Env         = "env"          // an environment variable that does not parse
	BadInput    = "bad_input"    // kmp: bad input a C API can only answer with nil or -1
	LiveBlocks  = "live_blocks"  // an allocator destroyed with blocks still allocated
	PinFallback = "pin_fallback" // blocks that could not be pinned came from the fallback allocator
	Unfreed     = "unfreed"      // an alloc.Buffer became unreachable without Free, a target.Pinned without Unpin
	HugeTLB     = "hugetlb"      // hugetlb pages asked for but not to be had
	DroppedLock = "dropped_lock" // user locks dropped with the pinned chunk they were in
	Driver      = "driver"       // a driver call failed where no caller can be told (a context stack the driver would not pop)
)

var (
	logger atomic.Pointer[slog.Logger]
	mu     sync.Mutex // orders the default lines
	out    io.Writer  = os.Stderr
)

// SetLogger routes every warning to l; nil restores the default line on
// stderr.
func SetLogger(l *slog.Logger) { logger.Store(l) }

// Logger returns the logger SetLogger set, or nil for the default.
func Logger() *slog.Logger { return logger.Load() }

// SetOutput replaces the writer of the default lines (os.Stderr) and
// returns a function restoring the previous one. For tests.
func SetOutput(w io.Writer) (restore func()) {
	mu.Lock()
	old := out
	out = w
	mu.Unlock()
	return func() {
		mu.Lock()
		out = old
		mu.Unlock()
	}
}

// Emit sends one warning of the given kind from package pkg ("alloc",
// "kmp", "target"). msg is the text after "ompalloc: warning: ". err, when
// not nil, is the error the warning is about (attribute "err", so that a
// handler can errors.Is it).
func Emit(kind, pkg, msg string, err error) {
	if l := logger.Load(); l != nil {
		attrs := []slog.Attr{slog.String("kind", kind), slog.String("package", pkg)}
		if err != nil {
			attrs = append(attrs, slog.Any("err", err))
		}
		l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
		return
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "ompalloc: warning: %s\n", oneLine(msg))
}

// oneLine escapes the control characters of msg (newline, CR, ESC, ...)
// as Go's %q would, so that a warning is one line and a value taken from
// the environment cannot forge a second warning or drive the terminal.
// Messages quote such values already; this is the last guard.
func oneLine(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var b strings.Builder
	for _, r := range msg {
		if r < 0x20 || r == 0x7f {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Printf is Emit with a formatted message and no error.
func Printf(kind, pkg, format string, args ...any) {
	Emit(kind, pkg, fmt.Sprintf(format, args...), nil)
}
