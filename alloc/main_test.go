package alloc_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// TestMain fails the run if the tests leave blocks, pinned bytes, registry
// entries or locked memory behind (OMPALLOC_LEAKCHECK=1 shows where leaked
// blocks were allocated), and says how many faults the tests injected.
// Child processes skip the check.
//
// The user's OMP_*/OMPALLOC_* settings are removed first (testenv), and the
// host is the default device: the tests pin for the default device and read
// VmLck, which only the host's mlock moves, on a machine with a GPU too.
func TestMain(m *testing.M) {
	if testenv.Neutralize("OMPALLOC_ALLOC_CHILD") {
		_ = os.Setenv("OMP_DEFAULT_DEVICE", "initial")
	}
	code := leakcheck.Run(m, "OMPALLOC_ALLOC_CHILD")
	if n := fault.Injected(); n > 0 && os.Getenv("OMPALLOC_ALLOC_CHILD") == "" {
		fmt.Printf("alloc: %d faults injected through internal/fault and survived\n", n)
	}
	os.Exit(code)
}
