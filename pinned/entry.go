package pinned

import "fmt"

// Kind says how an entry's memory came to be locked, and so who unlocks it.
type Kind uint8

const (
	// KindLocked: this registry asked the Locker to lock the range; the last
	// reference unlocks it through the Locker.
	KindLocked Kind = iota + 1
	// KindExternal: the range was already locked outside this runtime; it is
	// recorded so transfers can use it, and never unlocked by us.
	KindExternal
	// KindRegistered: memory the device allocated as pinned host memory
	// (Register); it lives until Unregister and is never unlocked by us.
	KindRegistered
)

func (k Kind) String() string {
	switch k {
	case KindLocked:
		return "locked"
	case KindExternal:
		return "external"
	case KindRegistered:
		return "registered"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// EntryInfo is a copy of one entry's state.
type EntryInfo struct {
	Host, Dev, Size uintptr
	Refs            int  // explicit references (Lock)
	MappedRefs      int  // implicit references (LockMapped)
	External        bool // Kind == KindExternal: never unlocked by us
	Kind            Kind
}
