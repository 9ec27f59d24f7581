// Package scripttest checks bench/icount/run.sh against a stand-in for
// valgrind whose instruction count is a known line in the operation count:
// that the script takes the difference of its two runs over N2-N1, pairs
// each case with glibc's, and that its gate on the 64 B pair fails above
// the limit and passes at it. With TIME=1 a stand-in for the timed runs
// (NATIVE) checks how run.sh calls pair (-ref to the shared object it
// built, for the cases with a glibc counterpart only) and prints known
// figures per process, so that the table's least, ratio and paired median
// can be checked; one more run times the real programs. It has only tests
// (a Go package may not sit beside glibc_pair.c).
package scripttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	out, _, code := runScriptErr(t, env...)
	return out, code
}

// runScriptErr runs run.sh with the valgrind stand-in, N1=1000 N2=3000 and
// three cases, then env (which may override them), and returns its stdout,
// stderr and exit status.
func runScriptErr(t *testing.T, env ...string) (string, string, int) {
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
	return out.String(), errb.String(), code
}

// rows returns the table's rows by case name.
func rows(out string) map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 9 && f[0] != "case" {
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
			require.Equal(t, []string{"500.0", "-", "glibc-64", "140.0", "-", "3.57x", "-", "-"}, r["default-64"], out)
			require.Equal(t, []string{"700.0", "-", "glibc-4194304", "140.0", "-", "5.00x", "-", "-"}, r["default-4MiB"], out)
			require.Equal(t, []string{"700.0", "-", "-", "-", "-", "-", "-", "-"}, r["lock-hit"], out)
			if tc.verdict != "" {
				require.Contains(t, out, tc.verdict)
			} else {
				require.NotContains(t, out, "# gate")
			}
		})
	}
}

// fakeNative stands in for the timed runs (run.sh's NATIVE prefix): it
// logs its arguments to $FAKE_STATE/log, refuses (exit 1) a -ref for a case
// without a glibc counterpart, a missing one for a case with one, and a
// -ref file without glibc_pairs_ns in it, and prints for the k-th process
// of a case the k-th of a few known figures, the lines pair -ref prints.
const fakeNative = `#!/usr/bin/env bash
echo "$*" >>"$FAKE_STATE/log"
prog=$1 c= ref=
shift
[[ -x $prog && $prog == */pair ]] || { echo "not pair: $prog" >&2; exit 1; }
while (($#)); do
	case $1 in
	-case) c=$2; shift ;;
	-ref) ref=$2; shift ;;
	esac
	shift
done
k=$(($(cat "$FAKE_STATE/$c" 2>/dev/null || echo 0) + 1))
echo $k >"$FAKE_STATE/$c"
case $c in
default-64 | align64-64 | default-4MiB)
	[[ -n $ref ]] || { echo "$c without -ref" >&2; exit 1; }
	grep -q glibc_pairs_ns "$ref" || { echo "$ref: no glibc_pairs_ns" >&2; exit 1; } ;;
*) [[ -z $ref ]] || { echo "-ref for $c" >&2; exit 1; } ;;
esac
pick() { local -a v=($1); echo "${v[(k - 1) % ${#v[@]}]}"; }
case $c in
default-64)
	echo "default-64 $(pick '12 10 11')"
	echo "glibc-64 $(pick '5 4 6')"
	echo "default-64/glibc-64 paired-median $(pick '2.5 2.1 2.3')" ;;
align64-64)
	echo "align64-64 13"
	echo "glibc-64 3"
	echo "align64-64/glibc-64 paired-median 4" ;;
default-4MiB)
	echo "default-4MiB $(pick '61 60.5 62')"
	echo "glibc-4194304 15"
	echo "default-4MiB/glibc-4194304 paired-median $(pick '4.1 4.3 4.2 4.0')" ;;
*) echo "$c $(pick '301.5 300.25 302')" ;;
esac
`

// TestTimedTable: with TIME=1, each case runs ROUNDS processes through
// NATIVE; those with a glibc counterpart get -ref to the shared object
// run.sh built, with the default short runs (TN=20000, RUNS=1000). Each
// row's ns are the least its own processes printed (align64-64's lower
// glibc-64 figure stays out of default-64's row), the time ratio is of
// those, and paired is the median of the processes' paired medians (for
// default-4MiB, four processes: the mean of the middle two).
func TestTimedTable(t *testing.T) {
	testenv.Long(t, "runs bench/icount/run.sh, building its Go program with go build and glibc's with gcc")
	state := t.TempDir()
	fake := filepath.Join(t.TempDir(), "native")
	require.NoError(t, os.WriteFile(fake, []byte(fakeNative), 0o755))
	for _, rounds := range []string{"3", "4"} {
		t.Run("ROUNDS="+rounds, func(t *testing.T) {
			state := filepath.Join(state, rounds)
			require.NoError(t, os.Mkdir(state, 0o755))
			out, errs, code := runScriptErr(t, "TIME=1", "ROUNDS="+rounds, "NATIVE="+fake, "FAKE_STATE="+state,
				"CASES=default-64 align64-64 default-4MiB lock-hit")
			require.Equal(t, 0, code, out+errs)
			r := rows(out)
			if rounds == "3" {
				require.Equal(t, []string{"500.0", "10.00", "glibc-64", "140.0", "4.00", "3.57x", "2.50x", "2.30x"}, r["default-64"], out)
				require.Equal(t, []string{"700.0", "60.50", "glibc-4194304", "140.0", "15.00", "5.00x", "4.03x", "4.20x"}, r["default-4MiB"], out)
			} else {
				require.Equal(t, []string{"500.0", "10.00", "glibc-64", "140.0", "4.00", "3.57x", "2.50x", "2.40x"}, r["default-64"], out)
				require.Equal(t, []string{"700.0", "60.50", "glibc-4194304", "140.0", "15.00", "5.00x", "4.03x", "4.15x"}, r["default-4MiB"], out)
			}
			require.Equal(t, []string{"700.0", "13.00", "glibc-64", "140.0", "3.00", "5.00x", "4.33x", "4.00x"}, r["align64-64"], out)
			require.Equal(t, []string{"700.0", "300.25", "-", "-", "-", "-", "-", "-"}, r["lock-hit"], out)
			require.Contains(t, out, "# paired medians, one per process: default-64: 2.5 2.1 2.3")
			require.Contains(t, out, "# time ratios (least / least), one per process: default-64: 2.40 2.50 1.83")

			log, err := os.ReadFile(filepath.Join(state, "log"))
			require.NoError(t, err)
			// ROUNDS interleaved rounds: the cases in CASES' order, again and again.
			calls := strings.Split(strings.TrimSpace(string(log)), "\n")
			cases := []string{"default-64", "align64-64", "default-4MiB", "lock-hit"}
			require.Len(t, calls, len(cases)*int(rounds[0]-'0'), string(log))
			withRef := regexp.MustCompile(`^\S+/pair -case (default-64|align64-64|default-4MiB) -n 20000 -time -runs 1000 -ref \S+/glibc_pair\.so$`)
			alone := regexp.MustCompile(`^\S+/pair -case (lock-hit) -n 20000 -time -runs 1000$`)
			for i, c := range calls {
				m := withRef.FindStringSubmatch(c)
				if m == nil {
					m = alone.FindStringSubmatch(c)
				}
				require.NotNil(t, m, "unexpected call: %s", c)
				require.Equal(t, cases[i%len(cases)], m[1], "call %d: %s", i, c)
			}
		})
	}
}

// TestTimedReal runs TIME=1 with the real programs, a few short runs: the
// pair program run.sh built accepts its -ref to the shared object run.sh
// built, and the table gets real figures from it (numbers, not what they
// are: no timing is asserted).
func TestTimedReal(t *testing.T) {
	testenv.Long(t, "runs bench/icount/run.sh, building its Go program with go build and glibc's with gcc")
	out, errs, code := runScriptErr(t, "TIME=1", "TN=200", "RUNS=3", "ROUNDS=2", "CASES=default-64 lock-hit")
	require.Equal(t, 0, code, out+errs)
	r := rows(out)
	num := regexp.MustCompile(`^[0-9]+\.[0-9]{2}$`)
	ratio := regexp.MustCompile(`^[0-9]+\.[0-9]{2}x$`)
	d := r["default-64"]
	require.Len(t, d, 8, out)
	require.Regexp(t, num, d[1], out)
	require.Equal(t, "glibc-64", d[2], out)
	require.Regexp(t, num, d[4], out)
	require.Regexp(t, ratio, d[6], out)
	require.Regexp(t, ratio, d[7], out)
	l := r["lock-hit"]
	require.Len(t, l, 8, out)
	require.Regexp(t, num, l[1], out)
	require.Equal(t, []string{"-", "-", "-", "-", "-", "-"}, l[2:], out)
	require.Regexp(t, `# paired medians, one per process: default-64: [0-9.]+ [0-9.]+\n`, out)
}
