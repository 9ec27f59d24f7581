package cmem

import "runtime/debug"

func debugPanicOnFault() bool {
	old := debug.SetPanicOnFault(false)
	debug.SetPanicOnFault(old)
	return old
}
