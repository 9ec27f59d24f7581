#!/usr/bin/env bash
# run.sh: the instruction-count benchmark of ompalloc's hot paths, with
# glibc's malloc/free pair measured in the same run. Each case runs under
# valgrind's cachegrind (--cache-sim=no) at N1 and N2 operations; the
# figure is (I(N2)-I(N1))/(N2-N1), so start-up and set-up drop out and the
# count does not move with the machine's load (repeat runs agree within a
# fraction of an instruction). With TIME=1 the same programs also run
# natively, ROUNDS interleaved rounds of both sides, and the least ns per
# operation of each is printed beside the counts.
#
# Usage: bench/icount/run.sh
#
# Environment:
#   N1=100000 N2=600000  operations of the two counted runs
#   TIME=0               1: also time every case natively (ns per op, least of all runs)
#   TN=1000000 RUNS=5 ROUNDS=1   operations per timed run, runs per round, rounds
#   GATE_DEFAULT64=      instructions the default-64 pair may cost at most:
#                        over it, the script prints the table and exits 3
#   CASES=               the Go cases to run (default: all five)
#   VALGRIND=valgrind    CC=gcc
#
# Needs valgrind and gcc (exit status 2 without them; it installs nothing).
# Exit status 1 when a program fails, 3 when the gate fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

N1=${N1:-100000}
N2=${N2:-600000}
TIME=${TIME:-0}
TN=${TN:-1000000}
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-1}
GATE_DEFAULT64=${GATE_DEFAULT64:-}
CASES=${CASES:-default-64 align64-64 default-4MiB pinned-64MiB lock-hit}
VALGRIND=${VALGRIND:-valgrind}
CC=${CC:-gcc}

for tool in "$VALGRIND" "$CC"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "run.sh: need $tool (Debian packages valgrind and gcc)" >&2
		exit 2
	fi
done
if ((N2 <= N1 || N1 < 1)); then
	echo "run.sh: want 1 <= N1 < N2 (N1=$N1 N2=$N2)" >&2
	exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# -compressdwarf=false lets cg_annotate attribute the counts to lines of a
# kept binary (PAIR_BIN=path keeps it).
(cd "$root" && CGO_ENABLED=0 go build -ldflags=-compressdwarf=false -o "$tmp/pair" ./bench/icount/pair)
"$CC" -O2 -fno-builtin -o "$tmp/glibc_pair" "$here/glibc_pair.c"
[[ -z ${PAIR_BIN:-} ]] || cp "$tmp/pair" "$PAIR_BIN"

# irefs N CMD...: the instructions cachegrind counts for CMD (whose last
# argument is the operation count N, put in by the caller).
irefs() {
	local out
	# valgrind 3.19 cannot decode RDTSCP, which Go's runtime uses where the
	# CPU has it: GODEBUG turns it off.
	if ! out=$(GODEBUG=cpu.rdtscp=off "$VALGRIND" --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file=/dev/null "$@" 2>&1); then
		printf '%s\n' "$out" >&2
		echo "run.sh: failed under valgrind: $*" >&2
		return 1
	fi
	printf '%s\n' "$out" | sed -n 's/^==[0-9]*== I *refs: *//p' | tr -d ,
}

# perop NAME CMD-BEFORE-N [CMD-AFTER-N]: instructions per operation.
perop() {
	local name=$1 pre=$2 post=${3:-} a b
	a=$(irefs $pre "$N1" $post) || return 1
	b=$(irefs $pre "$N2" $post) || return 1
	if [[ -z $a || -z $b ]]; then
		echo "run.sh: $name: no instruction count in valgrind's output" >&2
		return 1
	fi
	awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" -v k="$name" \
		'BEGIN { printf "%s %.1f\n", k, (b - a) / (n2 - n1) }'
}

counts=$tmp/counts
: >"$counts"
for c in $CASES; do
	echo "run.sh: counting $c" >&2
	perop "$c" "$tmp/pair -case $c -n" >>"$counts" || exit 1
done
for size in 64 4194304; do
	echo "run.sh: counting glibc-$size" >&2
	perop "glibc-$size" "$tmp/glibc_pair $size" >>"$counts" || exit 1
done

times=$tmp/times
: >"$times"
if [[ $TIME == 1 ]]; then
	for ((r = 1; r <= ROUNDS; r++)); do
		echo "run.sh: timing round $r/$ROUNDS" >&2
		for c in $CASES; do
			"$tmp/pair" -case "$c" -n "$TN" -time -runs "$RUNS" >>"$times" || exit 1
		done
		for size in 64 4194304; do
			echo "glibc-$size $("$tmp/glibc_pair" "$size" "$TN" time "$RUNS")" >>"$times" || exit 1
		done
	done
fi

# least: the lowest figure of each name.
least() { awk '{ if (!($1 in b) || $2 + 0 < b[$1]) b[$1] = $2 + 0 } END { for (k in b) printf "%s %.2f\n", k, b[k] }' "$1"; }
least "$times" >"$tmp/times.best"
lookup() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }

glibc_for() {
	case $1 in
	*-64) echo glibc-64 ;;
	*-4MiB) echo glibc-4194304 ;;
	esac
}

printf '%-14s %10s %9s   %-14s %10s %9s %8s %8s\n' case instr/op ns/op reference instr/op ns/op instr time
for c in $CASES; do
	ours=$(lookup "$c" "$counts")
	ourt=$(lookup "$c" "$tmp/times.best")
	ref=$(glibc_for "$c")
	if [[ -n $ref ]]; then
		theirs=$(lookup "$ref" "$counts")
		theirt=$(lookup "$ref" "$tmp/times.best")
		printf '%-14s %10s %9s   %-14s %10s %9s %8s %8s\n' "$c" "$ours" "${ourt:--}" "$ref" "$theirs" "${theirt:--}" \
			"$(ratio "$ours" "$theirs")" "$(ratio "$ourt" "$theirt")"
	else
		printf '%-14s %10s %9s   %-14s %10s %9s %8s %8s\n' "$c" "$ours" "${ourt:--}" - - - - -
	fi
done
echo "# instr/op: cachegrind's I refs, (I(N2)-I(N1))/(N2-N1), N1=$N1 N2=$N2; glibc: gcc -O2 -fno-builtin glibc_pair.c, same run"
if [[ $TIME == 1 ]]; then
	echo "# ns/op: native, least of $ROUNDS round(s) x $RUNS runs of $TN operations; instr and time: ours / glibc's"
fi

if [[ -n $GATE_DEFAULT64 ]]; then
	got=$(lookup default-64 "$counts")
	if [[ -z $got ]]; then
		echo "# gate: no default-64 count (CASES=$CASES)"
		exit 3
	fi
	if awk -v g="$got" -v m="$GATE_DEFAULT64" 'BEGIN { exit !(g > m) }'; then
		echo "# gate FAILED: the default-64 pair costs $got instructions, more than GATE_DEFAULT64=$GATE_DEFAULT64"
		exit 3
	fi
	echo "# gate passed: default-64 pair $got instructions <= $GATE_DEFAULT64"
fi
