//go:build !ompalloc_testhooks

package heap

// testHooks is false in every build but the tests' (tag
// ompalloc_testhooks): the hooks it guards compile to nothing.
const testHooks = false

// FastWindowHook is called by AllocEntry in its pinned section, between
// the check of the destroyed flag (and the pop) and the count, in builds with the tag
// ompalloc_testhooks only (it may spin, never block: the caller is
// pinned). Tests widen the window a closer must wait out with it.
var FastWindowHook func()
