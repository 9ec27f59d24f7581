// Package scripttest checks bench/icount/run.sh against a stand-in for
// valgrind whose instruction count is a known line in the operation count:
// that the script takes the difference of its two runs over N2-N1, pairs
// each case with glibc's, and that its gate on the 64 B pair fails above
// the limit and passes at it. It has only tests (a Go package may not sit
// beside glibc_pair.c).
package scripttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/testenv"
)

// fakeValgrind prints cachegrind's summary line for "I refs" as
// 1,234,567 + per*N, where N is the operation count in the command it was
// given (after -n for the Go program, the second argument for glibc_pair)
// and per is 500 for default-64, 700 for every other Go case, 140 for glibc.
const fakeValgrind = `#!/usr/bin/env bash
prog= n= per=
while (($#)); do
	case $1 in
	--*) ;;
	*/pair) prog=go ;;
	*/glibc_pair) prog=glibc; n=$3; break ;;
	-case) [[ $2 == default-64 ]] && per=500 || per=700; shift ;;
	-n) n=$2; shift ;;
	esac
	shift
done
[[ $prog == glibc ]] && per=140
echo "==1== I   refs:      $(printf "%'d" $((1234567 + per * n)))"
`

func runScript(t *testing.T, env ...string) (string, int) {
	t.Helper()
	for _, tool := range []string{"bash", "gcc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: run.sh cannot run here", tool)
		}
	}
	_, err := os.ReadFile("../run.sh") // so that go test's cache notices edits
	require.NoError(t, err)
	fake := filepath.Join(t.TempDir(), "valgrind")
	require.NoError(t, os.WriteFile(fake, []byte(fakeValgrind), 0o755))
	cmd := exec.Command("bash", "../run.sh")
	cmd.Env = append(os.Environ(), append([]string{"VALGRIND=" + fake, "LC_ALL=en_US.UTF-8",
		"N1=1000", "N2=3000", "CASES=default-64 default-4MiB lock-hit"}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, errb.String())
	}
	return out.String(), code
}

// rows returns the table's rows by case name.
func rows(out string) map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[0] != "case" {
			m[f[0]] = f[1:]
		}
	}
	return m
}

func TestCountsAndGate(t *testing.T) {
	testenv.Long(t, "runs bench/icount/run.sh three times, each building its Go program with go build and glibc's with gcc")
	for _, tc := range []struct {
		name, gate string
		code       int
		verdict    string
	}{
		{"no gate", "", 0, ""},
		{"gate at the count", "GATE_DEFAULT64=500", 0, "# gate passed"},
		{"gate below the count", "GATE_DEFAULT64=499.9", 3, "# gate FAILED: the default-64 pair costs 500.0 instructions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runScript(t, tc.gate)
			require.Equal(t, tc.code, code, out)
			r := rows(out)
			require.Equal(t, []string{"500.0", "-", "glibc-64", "140.0", "-", "3.57x", "-"}, r["default-64"], out)
			require.Equal(t, []string{"700.0", "-", "glibc-4194304", "140.0", "-", "5.00x", "-"}, r["default-4MiB"], out)
			require.Equal(t, []string{"700.0", "-", "-", "-", "-", "-", "-"}, r["lock-hit"], out)
			if tc.verdict != "" {
				require.Contains(t, out, tc.verdict)
			} else {
				require.NotContains(t, out, "# gate")
			}
		})
	}
}
