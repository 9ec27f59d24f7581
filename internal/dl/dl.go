//go:build linux || darwin

package dl

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"
)

// dlMu serialises dlopen/dlsym: dlerror is per thread, so each call and the
// dlerror that explains it must run on one OS thread, with nobody between.
var dlMu sync.Mutex

// dlopen opens path with RTLD_NOW|RTLD_GLOBAL. The handle is never closed:
// GPU drivers must not be unloaded while a process runs.
func dlopen(path string) (uintptr, error) {
	dlMu.Lock()
	defer dlMu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, fmt.Errorf("dlopen %s: %w", path, err)
	}
	return h, nil
}

// dlsym returns the address of name in the library handle h, or 0 when it is
// absent. It never panics.
func dlsym(h uintptr, name string) uintptr {
	dlMu.Lock()
	defer dlMu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}
