package host

import (
	"fmt"
	"os"
	"testing"

	"github.com/ompalloc/ompalloc/internal/procstatus"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

// TestMain fails the run if the tests leave memory locked: every test
// closes its devices, and VmLck is the kernel's own count of what is
// locked.
func TestMain(m *testing.M) {
	testenv.Neutralize(limitChildEnv, mapCountChildEnv, seccompChildEnv)
	before, ok := procstatus.VmLckKiB()
	code := m.Run()
	if after, _ := procstatus.VmLckKiB(); code == 0 && ok && after != before {
		fmt.Fprintf(os.Stderr, "FAIL: leak check: VmLck is %d kB after the tests, %d kB before\n", after, before)
		code = 1
	}
	os.Exit(code)
}
