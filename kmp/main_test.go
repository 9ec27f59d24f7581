package kmp

import (
	"testing"

	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// TestMain fails the run if the tests leave blocks, pinned bytes, registry
// entries or locked memory behind (OMPALLOC_LEAKCHECK=1 shows where leaked
// blocks were allocated). Child processes skip it. The user's OMP_* and
// OMPALLOC_* settings are removed first (testenv).
func TestMain(m *testing.M) {
	testenv.Neutralize("OMPALLOC_KMP_CHILD")
	leakcheck.Main(m, "OMPALLOC_KMP_CHILD")
}
