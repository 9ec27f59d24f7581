package pinreg

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/pinned"
)

// The registry's answers are package pinned's public types, so
// that what target returns to a user is what this package computed.
type (
	Kind      = pinned.Kind
	EntryInfo = pinned.EntryInfo
	Stats     = pinned.Stats
)

const (
	KindLocked     = pinned.KindLocked
	KindExternal   = pinned.KindExternal
	KindRegistered = pinned.KindRegistered
)

// The registry's errors are the shared sentinels of internal/sentinel,
// which target re-exports; an invalid argument is
// sentinel.ErrInvalidArgument, by that one name.
var (
	ErrOverlap     = sentinel.ErrOverlap
	ErrNotLocked   = sentinel.ErrNotLocked
	ErrBusy        = sentinel.ErrBusy
	ErrStillLocked = sentinel.ErrStillLocked
)

// span formats [p, end) for messages.
func span(p, end uintptr) string { return fmt.Sprintf("[%#x, %#x)", p, end) }
