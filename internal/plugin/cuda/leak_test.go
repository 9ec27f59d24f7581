package cuda

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// driverLeaks asks the fake driver what its tests left alive: device,
// managed and pinned host allocations, registrations and streams. Every
// test closes what it opened, so all must be zero.
func driverLeaks() error {
	lib, err := dl.Open(dl.Spec{Name: "fake CUDA driver", Candidates: []string{fakeLib}})
	if err != nil {
		return err
	}
	live, err := lib.Sym("fakecuda_live")
	if err != nil {
		return err
	}
	var leaks []string
	for kind, what := range []string{"device allocations", "managed allocations", "pinned host allocations", "registrations", "streams", "blocks of memory pools"} {
		if n := int32(dlcall.Call(live, uintptr(kind))); n != 0 {
			leaks = append(leaks, fmt.Sprintf("%d %s", n, what))
		}
	}
	if len(leaks) > 0 {
		return fmt.Errorf("the fake driver still holds %v after the tests", leaks)
	}
	return nil
}
