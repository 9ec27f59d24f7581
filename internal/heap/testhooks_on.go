//go:build ompalloc_testhooks

package heap

// testHooks: this build runs the hooks (see testhooks_off.go).
const testHooks = true

// FastWindowHook: see testhooks_off.go.
var FastWindowHook func()
