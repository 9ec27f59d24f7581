package alloc_test

import "github.com/ompalloc/ompalloc/target"

// registered reports whether p lies in an entry of r (the test-side form
// of the IsPinned the read-only view no longer has: target.IsPinned is the
// one question a user asks).
func registered(r target.Registry, p uintptr) bool {
	_, ok := r.Entry(p)
	return ok
}
