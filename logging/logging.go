package logging

import (
	"log/slog"

	"github.com/ompalloc/ompalloc/internal/warn"
)

// Kind is the value of a warning record's "kind" attribute.
type Kind = string

// The kinds of warning.
const (
	// KindEnv: an environment variable (OMP_ALLOCATOR, OMP_DEFAULT_DEVICE,
	// OMPALLOC_*) does not parse; its default is used.
	KindEnv Kind = "env"
	// KindBadInput: kmp was given bad input (an unknown handle, a bad
	// device number, a foreign pointer...) and returned nil, -1 or nothing,
	// as the C API it mirrors.
	KindBadInput Kind = "bad_input"
	// KindLiveBlocks: an allocator was destroyed with blocks still
	// allocated (they stay valid until freed).
	KindLiveBlocks Kind = "live_blocks"
	// KindPinFallback: a pinned allocator could not pin and handed out
	// blocks from its fallback allocator, unpinned (once per allocator).
	KindPinFallback Kind = "pin_fallback"
	// KindUnfreed: an alloc.Buffer became unreachable without Free, or a
	// target.Pinned handle without Unpin (the garbage collector undid it).
	KindUnfreed Kind = "unfreed"
	// KindHugeTLB: hugetlb pages were asked for but could not be had
	// (once per process).
	KindHugeTLB Kind = "hugetlb"
	// KindDroppedLock: user locks inside a pinned chunk were dropped when
	// the chunk was released.
	KindDroppedLock Kind = "dropped_lock"
	// KindDriver: a GPU driver call failed where no caller can be told:
	// cuCtxPopCurrent after a call that succeeded (the call's result
	// stands; the goroutine keeps its OS thread, which ends with it).
	KindDriver Kind = "driver"
)

// SetLogger routes every warning of the module to l, at slog.LevelWarn;
// nil restores the default, one "ompalloc: warning: ..." line on stderr.
// It may be called at any time, from any goroutine.
func SetLogger(l *slog.Logger) { warn.SetLogger(l) }

// Logger returns the logger SetLogger set, or nil when warnings go to
// stderr.
func Logger() *slog.Logger { return warn.Logger() }
