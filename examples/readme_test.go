package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ompalloc/ompalloc/internal/mdsnippet"
	"github.com/ompalloc/ompalloc/internal/testenv"
	"github.com/stretchr/testify/require"
)

// stubModules are the stand-ins for third-party modules that snippets may
// import (testdata/stubs/README.md), by module path.
var stubModules = map[string]string{
	"gonum.org/v1/gonum":             "gonum",
	"github.com/apache/arrow-go/v18": "arrow",
	"gorgonia.org/tensor":            "tensor",
}

// Every Go snippet of the README is a whole program that passes go vet,
// builds cgo-free and runs, printing what its "// Output:" comment says if
// it has one. The snippets build in a module of their own that uses this
// checkout for ompalloc and the stand-ins for gonum, Arrow and gorgonia.
func TestREADMESnippets(t *testing.T) {
	testenv.Long(t, "vets, builds and runs every Go snippet of the README")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH to build the snippets")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	snips := mdsnippet.Go(string(md))
	require.GreaterOrEqual(t, len(snips), 5, "the README's Go snippets (example, kmp, gonum, Arrow, gorgonia)")

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	stubs, err := filepath.Abs(filepath.Join("testdata", "stubs"))
	require.NoError(t, err)

	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module readme.snippets\n\ngo 1.25.0\n\nrequire github.com/ompalloc/ompalloc v0.0.0\n\n")
	// ompalloc's own requirements, so that the module graph is complete
	// without a network.
	for _, m := range regexp.MustCompile(`(?ms)^require\s*\(.*?\)|^require [^\n(]+$`).FindAllString(string(gomod), -1) {
		mod.WriteString(m + "\n")
	}
	fmt.Fprintf(&mod, "\nreplace github.com/ompalloc/ompalloc => %s\n", root)
	for path, d := range stubModules {
		v := "v0.0.0"
		if m := regexp.MustCompile(`/v(\d+)$`).FindStringSubmatch(path); m != nil {
			v = "v" + m[1] + ".0.0" // a major-version path needs that major
		}
		fmt.Fprintf(&mod, "require %s %s\nreplace %s => %s\n", path, v, path, filepath.Join(stubs, d))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644))
	for i, s := range snips {
		require.True(t, strings.HasPrefix(s.Code, "package main\n"),
			"README.md:%d: a Go snippet is a whole program (package main), so that this test can check it", s.Line)
		d := filepath.Join(dir, fmt.Sprintf("snippet%d", i))
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "main.go"), []byte(s.Code), 0o644))
	}

	env := append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	run := func(name string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
		return out
	}
	run(goBin, "vet", "./...")
	bin := filepath.Join(dir, "bin")
	run(goBin, "build", "-o", bin+string(filepath.Separator), "./...")

	for i, s := range snips {
		t.Run(fmt.Sprintf("README.md:%d", s.Line), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, fmt.Sprintf("snippet%d", i)))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
			if want, ok := mdsnippet.WantOutput(s.Code); ok {
				require.Equal(t, want, stdout.String())
			}
		})
	}
}
