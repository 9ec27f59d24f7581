package logging

import (
	"log/slog"

	"github.com/ompalloc/ompalloc/internal/warn"
)

// SetLogger routes every warning of the module to l, at slog.LevelWarn;
// nil restores the default, one "ompalloc: warning: ..." line on stderr.
// It may be called at any time, from any goroutine.
func SetLogger(l *slog.Logger) { warn.SetLogger(l) }

// Logger returns the logger SetLogger set, or nil when warnings go to
// stderr.
func Logger() *slog.Logger { return warn.Logger() }
