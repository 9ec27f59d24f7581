package scripttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runScript runs run.sh with extra environment and returns stdout, stderr and
// the exit status.
func runScript(t *testing.T, env ...string) (string, string, int) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found: run.sh cannot run here")
	}
	// Read what the script will read, so that go test's cache notices edits
	// (it only tracks files the test process itself opens).
	for _, f := range []string{"../run.sh", "../testdata/go_bench.txt", "../testdata/libomp_bench.txt"} {
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
	cmd := exec.Command("bash", "../run.sh")
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// rows returns the table rows of run.sh's output as name -> fields.
func rows(out string) map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && !strings.HasPrefix(line, "#") && f[0] != "case" {
			m[f[0]] = f[1:]
		}
	}
	return m
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func TestRunScriptTable(t *testing.T) {
	cases := []struct {
		name   string
		goOut  string // "" = testdata/go_bench.txt
		cOut   string // "" = testdata/libomp_bench.txt
		want   map[string][]string
		noteOn bool // the "no ompalloc figure" note is printed
	}{
		{
			name: "saved outputs: best of each, GOMAXPROCS suffix stripped, unrelated benchmarks ignored",
			want: map[string][]string{
				"AllocFree/default-64":          {"38.50", "41.55", "0.93"},
				"AllocFree/align64-64":          {"44.10", "41.08", "1.07"},
				"MixedBatch":                    {"25.50", "51.00", "0.50"},
				"AllocFreeParallel2/default-64": {"42.00", "42.00", "1.00"},
				"PinnedAllocFree/1MiB":          {"-", "54.03", "-"},
			},
			noteOn: true,
		},
		{
			name: "GOMAXPROCS=1 names carry no suffix; a -16 suffix is stripped",
			goOut: "BenchmarkAllocFree/default-64 \t1000\t 20.00 ns/op\n" +
				"BenchmarkAllocFree/align64-64-16 \t1000\t 30.00 ns/op\n" +
				"BenchmarkMixedBatch \t1000\t 40.00 ns/op\n" +
				"BenchmarkAllocFreeParallel2/default-64-16 \t1000\t 50.00 ns/op\n" +
				"BenchmarkPinnedAllocFree/1MiB-16 \t100\t 2000 ns/op\t 3 B/op\n",
			cOut: "# header\nAllocFree/default-64 40\nAllocFree/align64-64 30\nMixedBatch 20\n" +
				"AllocFreeParallel2/default-64 50\nPinnedAllocFree/1MiB 1000\n",
			want: map[string][]string{
				"AllocFree/default-64":          {"20.00", "40.00", "0.50"},
				"AllocFree/align64-64":          {"30.00", "30.00", "1.00"},
				"MixedBatch":                    {"40.00", "20.00", "2.00"},
				"AllocFreeParallel2/default-64": {"50.00", "50.00", "1.00"},
				"PinnedAllocFree/1MiB":          {"2000.00", "1000.00", "2.00"},
			},
		},
		{
			name:  "no Go benchmarks yet",
			goOut: "PASS\nok  \tgithub.com/ompalloc/ompalloc/kmp\t0.01s\n",
			want: map[string][]string{
				"AllocFree/default-64": {"-", "41.55", "-"},
				"MixedBatch":           {"-", "51.00", "-"},
			},
			noteOn: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goFile, cFile := "../testdata/go_bench.txt", "../testdata/libomp_bench.txt"
			if c.goOut != "" {
				goFile = write(t, "go.txt", c.goOut)
			}
			if c.cOut != "" {
				cFile = write(t, "c.txt", c.cOut)
			}
			out, stderr, code := runScript(t, "GO_BENCH_OUTPUT="+goFile, "LIBOMP_BENCH_OUTPUT="+cFile)
			require.Equal(t, 0, code, stderr)
			got := rows(out)
			require.Len(t, got, 5, out)
			for name, w := range c.want {
				require.Equal(t, w, got[name], "%s\n%s", name, out)
			}
			require.Equal(t, c.noteOn, strings.Contains(out, "have no ompalloc figure"), out)
		})
	}
}

func TestRunScriptWithoutClang(t *testing.T) {
	out, stderr, code := runScript(t, "CLANG=clang-does-not-exist")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "clang-16 clang-tools-16 libomp-16-dev")
}
