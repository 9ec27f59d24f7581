#!/usr/bin/env bash
# run.sh: ompalloc's allocation engine (the Go benchmarks of ./kmp) side by
# side with LLVM libomp 16 (libomp_bench.c), measured in the same run.
# Installs nothing. Prints the raw outputs on stderr and the table on stdout.
#
# Usage: bench/alloc/run.sh
#
# Environment:
#   COUNT=5              go test -count; the best (lowest) of the runs is kept
#   ROUNDS=1             rounds of both sides, C then Go, interleaved: on a
#                        shared machine the load moves between the two sides
#                        less than within one long run (best over all rounds)
#   BENCHTIME=           go test -benchtime (default: go's own)
#   CTIME=0.2 CRUNS=5    seconds per run and runs of the C benchmark (best kept)
#   CLANG=clang-16       compiler for the C benchmark
#   LLVM_LIB=/usr/lib/llvm-16/lib   where libomp.so lives
#   GO_BENCH_OUTPUT=F    read saved `go test -bench` output from F instead of running it
#   LIBOMP_BENCH_OUTPUT=F   read saved libomp_bench output from F instead of building it
#
# Exit status: 0 with a table, 1 when a benchmark fails, 2 when clang-16 or
# libomp is missing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

COUNT=${COUNT:-5}
ROUNDS=${ROUNDS:-1}
BENCHTIME=${BENCHTIME:-}
CTIME=${CTIME:-0.2}
CRUNS=${CRUNS:-5}
CLANG=${CLANG:-clang-16}
LLVM_LIB=${LLVM_LIB:-/usr/lib/llvm-16/lib}

# The cases, with the names both sides use.
cases="AllocFree/default-64 AllocFree/align64-64 MixedBatch AllocFreeParallel2/default-64 PinnedAllocFree/1MiB"
go_pattern='^Benchmark(AllocFree|MixedBatch|AllocFreeParallel2|PinnedAllocFree)'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- both sides, ROUNDS times --------------------------------------------
go_cmd="go test -run '^\$' -bench '$go_pattern' -count $COUNT${BENCHTIME:+ -benchtime $BENCHTIME} ./kmp"
if [[ -n ${LIBOMP_BENCH_OUTPUT:-} ]]; then
	cp "$LIBOMP_BENCH_OUTPUT" "$tmp/libomp.txt"
else
	if ! command -v "$CLANG" >/dev/null 2>&1 || [[ ! -e $LLVM_LIB/libomp.so ]]; then
		echo "run.sh: need $CLANG and $LLVM_LIB/libomp.so;" \
			"install the Debian packages clang-16 clang-tools-16 libomp-16-dev" >&2
		exit 2
	fi
	"$CLANG" -O2 -fopenmp -L"$LLVM_LIB" -Wl,-rpath,"$LLVM_LIB" \
		-o "$tmp/libomp_bench" "$here/libomp_bench.c"
fi
if [[ -n ${GO_BENCH_OUTPUT:-} ]]; then
	cp "$GO_BENCH_OUTPUT" "$tmp/go.txt"
else
	# Built once, so that every round runs the same binary.
	if ! (cd "$root" && go test -c -o "$tmp/kmp.test" ./kmp) >"$tmp/build.txt" 2>&1; then
		cat "$tmp/build.txt" >&2
		echo "run.sh: go test -c failed" >&2
		exit 1
	fi
fi
for ((r = 1; r <= ROUNDS; r++)); do
	if [[ -z ${LIBOMP_BENCH_OUTPUT:-} ]]; then
		echo "run.sh: round $r/$ROUNDS: libomp_bench -time $CTIME -runs $CRUNS" >&2
		"$tmp/libomp_bench" -time "$CTIME" -runs "$CRUNS" >>"$tmp/libomp.txt"
	fi
	if [[ -z ${GO_BENCH_OUTPUT:-} ]]; then
		echo "run.sh: round $r/$ROUNDS: $go_cmd" >&2
		if ! (cd "$root/kmp" && "$tmp/kmp.test" -test.run '^$' -test.bench "$go_pattern" -test.count "$COUNT" \
			${BENCHTIME:+-test.benchtime "$BENCHTIME"}) >>"$tmp/go.txt" 2>&1; then
			cat "$tmp/go.txt" >&2
			echo "run.sh: the Go benchmarks failed" >&2
			exit 1
		fi
	fi
done
cat "$tmp/libomp.txt" >&2
cat "$tmp/go.txt" >&2

# --- best of each, per side ------------------------------------------------
# Go names carry a -GOMAXPROCS suffix ("AllocFree/default-64-2"), absent when
# GOMAXPROCS is 1; strip it only when the name is not already a case name
# (default-64 itself ends in a number).
awk -v cases="$cases" '
	BEGIN { n = split(cases, c, " "); for (i = 1; i <= n; i++) want[c[i]] = 1 }
	/^Benchmark/ {
		name = substr($1, length("Benchmark") + 1)
		if (!(name in want)) sub(/-[0-9]+$/, "", name)
		if (!(name in want)) next
		for (i = 3; i <= NF; i++)
			if ($i == "ns/op") {
				v = $(i - 1) + 0
				if (!(name in best) || v < best[name]) best[name] = v
			}
	}
	END { for (k in best) printf "%s %.2f\n", k, best[k] }
' "$tmp/go.txt" >"$tmp/go.best"

awk '
	/^#/ || NF < 2 { next }
	{ v = $2 + 0; if (!($1 in best) || v < best[$1]) best[$1] = v }
	END { for (k in best) printf "%s %.2f\n", k, best[k] }
' "$tmp/libomp.txt" >"$tmp/libomp.best"

# --- the table ---------------------------------------------------------------
lookup() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }

printf '%-32s %15s %13s %7s\n' "case" "ompalloc ns/op" "libomp ns/op" "ratio"
missing=0
for c in $cases; do
	ours=$(lookup "$c" "$tmp/go.best")
	theirs=$(lookup "$c" "$tmp/libomp.best")
	ratio=-
	if [[ -n $ours && -n $theirs ]]; then
		ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	fi
	[[ -n $ours ]] || missing=$((missing + 1))
	printf '%-32s %15s %13s %7s\n' "$c" "${ours:--}" "${theirs:--}" "$ratio"
done
echo "# ratio = ompalloc / libomp (below 1 means ompalloc is faster); best of $COUNT (Go) and $CRUNS (C) runs, $ROUNDS interleaved round(s)"
echo "# ompalloc: $go_cmd"
echo "# libomp:   $CLANG -O2 -fopenmp libomp_bench.c; libomp_bench -time $CTIME -runs $CRUNS"
if ((missing > 0)); then
	echo "# $missing case(s) have no ompalloc figure: are the kmp benchmarks written with these sub-benchmark names?"
fi
