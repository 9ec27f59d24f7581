package dl

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// Issue 10, item 5: on a system ompalloc does not support, a build fails
// with one line that names the supported systems, not purego's internals.
func TestUnsupportedSystemFailsWithOneLine(t *testing.T) {
	testenv.Long(t, "cross-builds the module for windows and freebsd")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	for _, goos := range []string{"windows", "freebsd"} {
		t.Run(goos, func(t *testing.T) {
			cmd := exec.Command(goBin, "build", "github.com/ompalloc/ompalloc/alloc")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH=amd64")
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, lines, 2, "the package line and one error:\n%s", out)
			require.Contains(t, lines[1], "ompalloc_builds_only_on_linux_and_macos")
			require.NotContains(t, string(out), "purego")
		})
	}
}
