package ecosystem

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ompalloc/ompalloc/internal/mdsnippet"
	"github.com/stretchr/testify/require"
)

// Every Go snippet of the README builds in this module, against the real
// Arrow, gonum and gorgonia at the versions go.mod names, and runs, printing what its "// Output:" comment says.
func TestREADMESnippetsWithRealModules(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH to build the snippets")
	}
	md, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	snips := mdsnippet.Go(string(md))
	var imports []string
	for _, s := range snips {
		for _, m := range []string{"github.com/apache/arrow-go/v18", "gonum.org/v1/gonum", "gorgonia.org/tensor"} {
			if strings.Contains(s.Code, `"`+m) {
				imports = append(imports, m)
			}
		}
	}
	require.Subset(t, imports, []string{"github.com/apache/arrow-go/v18", "gonum.org/v1/gonum", "gorgonia.org/tensor"},
		"the README shows ompalloc with Arrow, gonum and gorgonia")

	// The snippets live in a directory of this module while they are
	// checked ("_" keeps it out of ./... patterns).
	dir, err := os.MkdirTemp(".", "_snippets")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	var pkgs []string
	for i, s := range snips {
		require.True(t, strings.HasPrefix(s.Code, "package main\n"), "README.md:%d: a Go snippet is a whole program", s.Line)
		d := filepath.Join(dir, fmt.Sprintf("snippet%d", i))
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "main.go"), []byte(s.Code), 0o644))
		pkgs = append(pkgs, "./"+filepath.ToSlash(d))
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	// (go vet of the snippets runs in ./examples, against stand-ins:
	// vetting Arrow here would double this test's time.)
	bin, err := filepath.Abs(filepath.Join(dir, "bin"))
	require.NoError(t, err)
	run(append([]string{"build", "-o", bin + string(filepath.Separator)}, pkgs...)...)

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
