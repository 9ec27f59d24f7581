package pinreg

import (
	"fmt"

	"github.com/ompalloc/ompalloc/pinned"
)

// The registry's answers and errors are package pinned's public types, so
// that what target returns to a user is what this package computed.
type (
	Kind      = pinned.Kind
	EntryInfo = pinned.EntryInfo
	Stats     = pinned.Stats
	Locker    = pinned.Locker
	External  = pinned.External
)

const (
	KindLocked     = pinned.KindLocked
	KindExternal   = pinned.KindExternal
	KindRegistered = pinned.KindRegistered
)

var (
	ErrOverlap     = pinned.ErrOverlap
	ErrNotLocked   = pinned.ErrNotLocked
	ErrBusy        = pinned.ErrBusy
	ErrInvalid     = pinned.ErrInvalid
	ErrStillLocked = pinned.ErrStillLocked
)

// span formats [p, end) for messages.
func span(p, end uintptr) string { return fmt.Sprintf("[%#x, %#x)", p, end) }
