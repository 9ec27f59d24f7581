package device

import (
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/hooks"
)

// hostUses counts the pending host ranges of all queues (copies in flight
// that read or write host memory late, on the one-step pinned path): while
// it is 0, a free need not look for them (one atomic load).
var hostUses atomic.Int64

// HostUseAdded counts a queue's new pending host range; the queue calls it
// before the range is visible to FreeAfterUse. Each range counts in
// hooks.FreeChecks too, so that a free loads only that counter while none
// is pending.
func HostUseAdded() {
	hooks.FreeChecks.Add(1) // a reason for free to look, before it holds
	hostUses.Add(1)
}

// HostUseDone takes back what HostUseAdded counted, once the copy completed.
func HostUseDone() {
	hostUses.Add(-1)
	hooks.FreeChecks.Add(-1)
}

// HostInUse reports whether a copy on some queue may still read or write
// host memory: while it is false, a free need not call FreeAfterUse.
func HostInUse() bool { return hostUses.Load() > 0 }

// FreeAfterUse arranges for free to run once every copy issued so far on
// any queue whose host side overlaps [p, p+n) (the one-step pinned path,
// which reads or writes that memory late) has completed, and reports true;
// it reports false, and does not run free, when no such copy is in flight,
// so that the caller frees at once. alloc's Free of a pinned block calls it.
func FreeAfterUse(p, n uintptr, free func()) bool {
	if n == 0 || !HostInUse() {
		return false
	}
	w := current.Load()
	if w == nil {
		return false
	}
	// One countdown over the queues that use the range, plus one held until
	// every queue has its entry, so that free runs once, after the last.
	left := &atomic.Int64{}
	left.Store(1)
	done := func() {
		if left.Add(-1) == 0 {
			free()
		}
	}
	for _, d := range w.devices {
		// Only memory a registry knows is read or written late: a lock-free
		// lookup spares the queue scan for every other block. Memory one
		// device pinned is pinned for every device of its plugin, so the
		// queues of all of them are asked.
		if d.host || !SharedPinned(d.plugin, p, n) {
			continue
		}
		if l := d.Layer(); l != nil {
			l.AfterUse(p, n, left, done)
		}
	}
	if left.Load() == 1 {
		return false // no queue used it; done was never handed out
	}
	done()
	return true
}
