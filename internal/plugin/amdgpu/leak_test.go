package amdgpu

import (
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// driverLeaks asks the fake runtime what the tests left alive: pool
// allocations, locks, signals and copies in flight. Every test closes what
// it opened, so all must be zero.
func driverLeaks() error {
	lib, err := dl.Open(dl.Spec{Name: "fake HSA runtime", Candidates: []string{fakePath}})
	if err != nil {
		return err
	}
	count, err := lib.Sym("fakehsa_count")
	if err != nil {
		return err
	}
	var leaks []string
	for _, what := range []string{"allocs", "locks", "signals", "pending"} {
		name := append([]byte(what), 0)
		if n := int64(dlcall.Call(count, uintptr(unsafe.Pointer(&name[0])))); n != 0 {
			leaks = append(leaks, fmt.Sprintf("%d %s", n, what))
		}
	}
	if len(leaks) > 0 {
		return fmt.Errorf("the fake runtime still holds %v after the tests", leaks)
	}
	return nil
}
