package gputest

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
)

// childEnv marks a re-executed test binary running one test in a process
// of its own (a process loads its driver once).
const childEnv = "OMPALLOC_GPUTEST_CHILD"

// TestMain sets the fake up as the package documents for a user's
// TestMain: before any test touches a device. The tests and the Example
// share it (two fake CUDA devices and one fake AMD GPU).
func TestMain(m *testing.M) {
	testenv.Neutralize(childEnv)
	if os.Getenv(childEnv) == "" {
		if _, err := Start(CUDA(2), HSA(1)); err != nil {
			if errors.Is(err, ErrUnavailable) {
				fmt.Println("skipping the gputest tests:", err)
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
