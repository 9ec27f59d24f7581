package fakedrv

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/ompalloc/ompalloc"

// Issue 31: gputest builds the fakes from these C sources inside a user's
// test binary, so the module zip a user's go command downloads must exist
// and keep internal/fakedrv/testdata/*.c, or every user's GPU tests stop
// building. The zip is made by the go command itself, by its own rules
// (golang.org/x/mod/zip's: no nested module, no symlink, only file names
// module.CheckFilePath allows, size limits): `go mod download` of this
// checkout's HEAD commit, with GOPROXY=direct and git pointed at the local
// repository instead of GitHub (url.insteadOf), so nothing leaves the
// machine. Seen failing: the zip could not be made at all while
// internal/numa/testdata named PCI directories "0000:41:00.0" ("malformed
// file path ...: invalid char ':'"); numatest now lays those out.
func TestModuleZipKeepsTheFakes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a module zip with the go command")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git: the module zip is made from the repository")
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		t.Skipf("no go command at %s", goCmd)
	}
	out := func(args ...string) string {
		b, err := exec.Command(git, args...).Output()
		if err != nil {
			t.Skipf("not a git checkout (git %s: %v)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(b))
	}
	root := out("rev-parse", "--show-toplevel")
	head := out("rev-parse", "HEAD")
	if status := out("status", "--porcelain", "--", "testdata"); status != "" {
		t.Logf("testdata has uncommitted changes, the zip is HEAD's (%s):\n%s", head, status)
	}

	tmp := t.TempDir()
	gitconfig := filepath.Join(tmp, "gitconfig")
	require.NoError(t, os.WriteFile(gitconfig, []byte(`[url "file://`+root+`"]
	insteadOf = https://`+modulePath+`
[protocol "file"]
	allow = always
[safe]
	directory = *
`), 0o644))
	cmd := exec.Command(goCmd, "mod", "download", "-json", modulePath+"@"+head)
	cmd.Dir = tmp // outside any module
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL="+gitconfig, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GOPROXY=direct", "GOSUMDB=off", "GOPRIVATE="+modulePath, "GOVCS=*:git", "GOTOOLCHAIN=local",
		"GOFLAGS=-modcacherw", "GOMODCACHE="+filepath.Join(tmp, "mod"), "GO111MODULE=on", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var dl struct{ Path, Version, Zip, Dir, Error string }
	if jerr := json.Unmarshal(stdout.Bytes(), &dl); jerr != nil || runErr != nil || dl.Error != "" {
		t.Fatalf("go mod download %s@%s: %v %s\nstdout: %s\nstderr: %s", modulePath, head, runErr, dl.Error, stdout.String(), stderr.String())
	}

	zr, err := zip.OpenReader(dl.Zip)
	require.NoError(t, err)
	defer zr.Close()
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		files[f.Name] = f
	}
	prefix := modulePath + "@" + dl.Version + "/"
	require.Contains(t, files, prefix+"internal/fakedrv/fakedrv.go", "the zip holds the module (%d files)", len(files))
	names := Names()
	require.NotEmpty(t, names)
	for _, name := range names {
		f, ok := files[prefix+"internal/fakedrv/testdata/"+name+".c"]
		require.True(t, ok, "the module zip of %s lacks internal/fakedrv/testdata/%s.c: gputest could not build the fake in a user's test", dl.Version, name)
		r, err := f.Open()
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		want, err := Source(name)
		require.NoError(t, err)
		if !bytes.Equal(want, got) {
			t.Logf("%s.c differs from HEAD's (uncommitted changes?)", name)
		}
	}
	t.Logf("%s: %d files, the fakes %v among them", filepath.Base(dl.Zip), len(files), names)

	if os.Getenv(gpucodeEnv) != "" {
		gpucodeFromZip(t, goCmd, root, dl.Dir, tmp)
	}
}

// gpucodeEnv asks TestModuleZipKeepsTheFakes to run examples/ecosystem's
// gpucode tests against the module as the zip holds it (CI's ecosystem
// stage sets it: the ecosystem's other modules must be in the module
// cache or reachable).
const gpucodeEnv = "OMPALLOC_MODZIP_GPUCODE"

// gpucodeFromZip runs examples/ecosystem's gpucode tests, a module outside
// this one that tests GPU code on the fakes through gputest, with ompalloc
// replaced by dir (the module zip's files) instead of the checkout.
func gpucodeFromZip(t *testing.T, goCmd, root, dir, tmp string) {
	eco := filepath.Join(root, "examples", "ecosystem")
	mod, err := os.ReadFile(filepath.Join(eco, "go.mod"))
	require.NoError(t, err)
	const replace = modulePath + " => ../.."
	require.Contains(t, string(mod), replace)
	mod = []byte(strings.Replace(string(mod), replace, modulePath+" => "+dir, 1))
	modfile := filepath.Join(tmp, "ecosystem.mod")
	require.NoError(t, os.WriteFile(modfile, mod, 0o644))
	sum, err := os.ReadFile(filepath.Join(eco, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "ecosystem.sum"), sum, 0o644))
	cmd := exec.Command(goCmd, "test", "-count=1", "-v", "-modfile="+modfile, "./gpucode/...")
	cmd.Dir = eco
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestRoundTripOnFakeGPUs", "the fakes ran, not skipped:\n%s", out)
	require.NotContains(t, string(out), "--- SKIP", "%s", out)
	t.Logf("examples/ecosystem/gpucode against the module zip of %s:\n%s", dir, out)
}
