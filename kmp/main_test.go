package kmp

import (
	"testing"

	"github.com/ompalloc/ompalloc/internal/leakcheck"
)

// TestMain fails the run if the tests leave blocks, pinned bytes, registry
// entries or locked memory behind (OMPALLOC_LEAKCHECK=1 shows where leaked
// blocks were allocated). Child processes skip it.
func TestMain(m *testing.M) { leakcheck.Main(m, "OMPALLOC_KMP_CHILD") }
