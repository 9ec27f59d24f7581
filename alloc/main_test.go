package alloc_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
)

// TestMain fails the run if the tests leave blocks, pinned bytes, registry
// entries or locked memory behind (OMPALLOC_LEAKCHECK=1 shows where leaked
// blocks were allocated), and says how many faults the tests injected.
// Child processes skip the check.
func TestMain(m *testing.M) {
	code := leakcheck.Run(m, "OMPALLOC_ALLOC_CHILD")
	if n := fault.Injected(); n > 0 && os.Getenv("OMPALLOC_ALLOC_CHILD") == "" {
		fmt.Printf("alloc: %d faults injected through internal/fault and survived\n", n)
	}
	os.Exit(code)
}
