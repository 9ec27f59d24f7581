package alloc

import "sync/atomic"

// reserve adds n to *used unless that would take it above max (0: no
// limit), and reports the count it found. A compare-and-swap loop rather
// than add-then-undo: the count never reads above max, not even for an
// instant, so two racing requests cannot both fail when one would fit.
func reserve(used *atomic.Int64, n, max int64) (was int64, ok bool) {
	for {
		was = used.Load()
		if max > 0 && was+n > max {
			return was, false
		}
		if used.CompareAndSwap(was, was+n) {
			return was, true
		}
	}
}
