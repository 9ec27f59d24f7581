package reliability

import (
	"fmt"
	"os"
	"testing"

	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// TestMain fails the run if the tests leave blocks, pinned bytes, registry
// entries or locked memory behind, and prints how many faults the tests
// injected and survived. Child processes check their own baseline at the
// end of their test instead.
func TestMain(m *testing.M) {
	testenv.Neutralize(childEnv)
	code := leakcheck.Run(m, childEnv)
	if os.Getenv(childEnv) == "" && faultsSurvived.Load() > 0 {
		fmt.Printf("reliability: %d driver and device faults injected and survived\n", faultsSurvived.Load())
	}
	os.Exit(code)
}
