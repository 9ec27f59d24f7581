package target_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// TestNoBackDoorIntoTheRegistry: issue 28's back door, an outside program
// releasing a pinned allocator's chunk through d.Registry(), no longer
// compiles, nor does one importing the mutable registry; a program that
// only reads the registry does. The programs (testdata/backdoor) are
// checked by go vet in a module of their own that uses this checkout, as a
// user's module would.
func TestNoBackDoorIntoTheRegistry(t *testing.T) {
	testenv.Long(t, "type-checks three programs in a module of their own with go vet")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH to type-check the programs")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module outside.program\n\ngo 1.25.0\n\nrequire github.com/ompalloc/ompalloc v0.0.0\n\n")
	// ompalloc's own requirements, so that the module graph is complete
	// without a network.
	for _, m := range regexp.MustCompile(`(?ms)^require\s*\(.*?\)|^require [^\n(]+$`).FindAllString(string(gomod), -1) {
		mod.WriteString(m + "\n")
	}
	mod.WriteString("\nreplace github.com/ompalloc/ompalloc => " + root + "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644))

	vet := func(prog string) (string, error) {
		src, err := os.ReadFile(filepath.Join("testdata", "backdoor", prog, "main.go"))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, prog), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, prog, "main.go"), src, 0o644))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "vet", "./"+prog)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := vet("readonly")
	require.NoError(t, err, "a program reading the registry must type-check:\n%s", out)

	for _, tt := range []struct{ prog, want string }{
		{"release", `d.Registry().Release undefined (type target.Registry has no field or method Release)`},
		{"internal", `use of internal package github.com/ompalloc/ompalloc/internal/pinreg not allowed`},
	} {
		out, err := vet(tt.prog)
		require.Error(t, err, "%s: the back door compiles", tt.prog)
		require.Contains(t, out, tt.want, tt.prog)
	}
}
