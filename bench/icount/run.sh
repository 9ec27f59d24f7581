#!/usr/bin/env bash
# run.sh: the instruction-count benchmark of ompalloc's hot paths, with
# glibc's malloc/free pair measured in the same run. Each case runs under
# valgrind's cachegrind (--cache-sim=no) at N1 and N2 operations; the
# figure is (I(N2)-I(N1))/(N2-N1), so start-up and set-up drop out and the
# count does not move with the machine's load (repeat runs agree within a
# fraction of an instruction).
#
# With TIME=1 the cases also run natively and their thread CPU time per
# operation is printed beside the counts. A case with a glibc counterpart
# (default-64 and align64-64: glibc's 64 B pair; default-4MiB: 4 MiB) is
# timed side by side with it in ONE process (pair -ref, glibc_pair.c built
# as a shared object): RUNS short runs of TN operations, each of the case
# and then of glibc's pair, alternating on the same locked thread. On a
# shared VM a process's speed flips between phases lasting seconds (the
# same binary reads 15.5 ns in one and 27 ns in the next) and the vCPUs
# differ (glibc 6.0 ns on one, 12.6 on the other), so two minima taken in
# separate processes move by +-5% against each other, and long runs catch a
# quiet window less often for the slower program. Short adjacent runs see
# the same machine state. Printed: the least of each side, and the median
# of the per-run ratios (ours / glibc's), which does not hang on either
# side's one luckiest run; under the table, each process's paired median
# and ratio of leasts (a run's ratio depends on the machine's phase: see
# README.md before reading a low paired median as progress). Cases without
# a counterpart (pinned-64MiB, lock-hit) are timed alone, least of their
# runs.
#
# Usage: bench/icount/run.sh
#        CASES="default-64 align64-64" TIME=1 ROUNDS=5 bench/icount/run.sh
#
# Environment:
#   N1=100000 N2=600000  operations of the two counted runs
#   TIME=0               1: also time every case natively (thread CPU ns per op)
#   TN=20000 RUNS=1000   operations per timed run, runs per process
#   ROUNDS=1             processes per case, interleaved across the cases;
#                        least ns of all of them, median of their paired medians
#   NATIVE=              a command prefix for the timed runs (taskset -c 1: one CPU)
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
TN=${TN:-20000}
RUNS=${RUNS:-1000}
ROUNDS=${ROUNDS:-1}
NATIVE=${NATIVE:-}
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
# The same source as a shared object, for pair -ref: glibc_pairs_ns.
"$CC" -O2 -fno-builtin -shared -fPIC -o "$tmp/glibc_pair.so" "$here/glibc_pair.c"
[[ -z ${PAIR_BIN:-} ]] || cp "$tmp/pair" "$PAIR_BIN"

# irefs N CMD...: the instructions cachegrind counts for CMD (whose last
# argument is the operation count N, put in by the caller).
irefs() {
	local out
	# valgrind 3.19 cannot decode RDTSCP, which Go's runtime uses where the
	# CPU has it: GODEBUG turns it off. GOMAXPROCS=1: valgrind runs one
	# thread at a time, and an idle P's spinning thread or idle-time
	# collector burned instructions in proportion to the run's wall time
	# (lock-hit read 3,620, 10,388, even -23,473 per operation where it
	# otherwise read about 1,200); the cases run on one goroutine, and
	# glibc_pair ignores the variable.
	if ! out=$(GOMAXPROCS=1 GODEBUG=cpu.rdtscp=off "$VALGRIND" --tool=cachegrind --cache-sim=no \
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

# glibc_for CASE: the name of the case's glibc counterpart (as pair -ref
# prints it), or nothing.
glibc_for() {
	case $1 in
	default-64 | align64-64) echo glibc-64 ;;
	default-4MiB) echo glibc-4194304 ;;
	esac
}

# times holds "CASE NAME NS" for each line a timed process of CASE printed
# (NAME is CASE or its glibc counterpart); paired holds "CASE MEDIAN
# RATIO", one line per process of a case timed side by side: its paired
# median and the ratio of its two leasts.
times=$tmp/times paired=$tmp/paired
: >"$times"
: >"$paired"
if [[ $TIME == 1 ]]; then
	for ((r = 1; r <= ROUNDS; r++)); do
		echo "run.sh: timing round $r/$ROUNDS" >&2
		for c in $CASES; do
			ref=()
			[[ -z $(glibc_for "$c") ]] || ref=(-ref "$tmp/glibc_pair.so")
			# shellcheck disable=SC2086 # NATIVE is a command prefix
			out=$($NATIVE "$tmp/pair" -case "$c" -n "$TN" -time -runs "$RUNS" "${ref[@]}") || exit 1
			printf '%s\n' "$out" | awk -v c="$c" -v t="$times" -v p="$paired" '
				$2 == "paired-median" { m = $3; next }
				NF == 2 { print c, $1, $2 >> t; if ($1 == c) o = $2; else g = $2 }
				END { if (m != "") printf "%s %s %.2f\n", c, m, (g > 0 ? o / g : 0) >> p }'
		done
	done
fi

lookup() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }
# leastof CASE NAME: the least ns that CASE's processes printed for NAME.
leastof() { awk -v c="$1" -v k="$2" '$1 == c && $2 == k { v = $3 + 0; if (!n++ || v < b) b = v } END { if (n) printf "%.2f\n", b }' "$times"; }
# medianof CASE: the median of CASE's processes' paired medians.
medianof() {
	awk -v c="$1" '$1 == c { print $2 }' "$paired" | sort -g |
		awk '{ a[NR] = $1 } END { if (NR) printf "%.2fx\n", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }

row='%-14s %10s %9s   %-14s %10s %9s %8s %8s %8s\n'
printf "$row" case instr/op ns/op reference instr/op ns/op instr time paired
for c in $CASES; do
	ours=$(lookup "$c" "$counts")
	ourt=$(leastof "$c" "$c")
	ref=$(glibc_for "$c")
	if [[ -n $ref ]]; then
		theirs=$(lookup "$ref" "$counts")
		theirt=$(leastof "$c" "$ref")
		med=$(medianof "$c")
		printf "$row" "$c" "$ours" "${ourt:--}" "$ref" "$theirs" "${theirt:--}" \
			"$(ratio "$ours" "$theirs")" "$(ratio "$ourt" "$theirt")" "${med:--}"
	else
		printf "$row" "$c" "$ours" "${ourt:--}" - - - - - -
	fi
done
echo "# instr/op: cachegrind's I refs, (I(N2)-I(N1))/(N2-N1), N1=$N1 N2=$N2; glibc: gcc -O2 -fno-builtin glibc_pair.c, same run"
if [[ $TIME == 1 ]]; then
	echo "# ns/op: thread CPU time, least of $ROUNDS process(es) per case x $RUNS runs of $TN operations; a case with a reference"
	echo "#   timed glibc's pair in its own process (pair -ref), alternating runs: its glibc ns/op and time are from those processes;"
	echo "#   paired: median of each process's median of the per-run ratios ours/glibc's; instr and time: ours / glibc's"
	for c in $CASES; do
		[[ -n $(glibc_for "$c") ]] || continue
		echo "# paired medians, one per process: $c:$(awk -v c="$c" '$1 == c { printf " %s", $2 }' "$paired")"
		echo "# time ratios (least / least), one per process: $c:$(awk -v c="$c" '$1 == c { printf " %s", $3 }' "$paired")"
	done
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
