#!/usr/bin/env bash
# Registry benchmarks side by side, in one run:
#   lock+unlock of a contained sub-range at 100 / 10,000 / 100,000 locked
#   4 KiB regions: pinned vs LLVM libomptarget 16 (llvm_omp_target_lock_mem /
#   unlock_mem on its host plugin, device 0);
#   Lookup at 10,000 / 1,000,000 regions, 1 and 2 goroutines: pinned vs
#   std::set + std::shared_mutex (lookup_baseline.cpp, LLVM's lookup).
# Needs clang-16, libomp-16-dev (libomptarget) and g++. Not part of CI.
# Each side runs REPEAT times (default 3), interleaved; the table shows medians.
# Usage: bench/registry/run.sh   (REPEAT=5, BENCHTIME=2s, ITERS=..., OPS=... to tune)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
llvm=/usr/lib/llvm-16

missing=()
command -v clang-16 >/dev/null || missing+=(clang-16)
command -v g++ >/dev/null || missing+=(g++)
[ -e "$llvm/lib/libomptarget.so" ] || missing+=("libomptarget ($llvm/lib/libomptarget.so, package libomp-16-dev)")
[ -e "$llvm/lib/libomptarget.rtl.x86_64.nextgen.so" ] || missing+=("the x86_64 nextgen host plugin")
command -v go >/dev/null || missing+=(go)
if [ ${#missing[@]} -gt 0 ]; then
	echo "bench/registry: missing: ${missing[*]}" >&2
	echo "install: apt-get install clang-16 clang-tools-16 libomp-16-dev g++" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PATH="$llvm/bin:$PATH"
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$llvm/lib" -Wl,-rpath,"$llvm/lib" \
	"$here/llvm_lock.c" -o "$tmp/llvm_lock"
g++ -O2 -std=c++17 -pthread "$here/lookup_baseline.cpp" -o "$tmp/lookup_baseline"

(cd "$root" && go test -c -o "$tmp/pinned.test" ./internal/pinreg)
: >"$tmp/theirs"
: >"$tmp/go"
for i in $(seq "${REPEAT:-3}"); do
	echo "round $i: LLVM libomptarget 16, std::set + std::shared_mutex, Go ..." >&2
	LIBOMPTARGET_NEXTGEN_PLUGINS=1 "$tmp/llvm_lock" "${ITERS:-2000000}" >>"$tmp/theirs"
	"$tmp/lookup_baseline" "${OPS:-4000000}" >>"$tmp/theirs"
	(cd "$root/pinned" && "$tmp/pinned.test" -test.run '^$' \
		-test.bench '^(BenchmarkLockUnlockHit|BenchmarkLookup)$' \
		-test.benchtime "${BENCHTIME:-1s}") >>"$tmp/go"
done

# BenchmarkLockUnlockHit/regions=100-2  N  55.3 ns/op -> lockunlock/regions=100 55.3
awk '/^Benchmark/ && / ns\/op/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	sub(/^BenchmarkLockUnlockHit/, "lockunlock", name); sub(/^BenchmarkLookup/, "lookup", name)
	print name, $3 }' "$tmp/go" >"$tmp/ours.all"

# median of each case's values, cases in first-seen order
median() {
	awk '{ if (!($1 in n)) order[++k] = $1; v[$1, ++n[$1]] = $2 }
	END { for (i = 1; i <= k; i++) { c = order[i]; m = n[c]
		for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[c, b] < v[c, a]) { t = v[c, a]; v[c, a] = v[c, b]; v[c, b] = t }
		print c, (m % 2) ? v[c, (m + 1) / 2] : (v[c, m / 2] + v[c, m / 2 + 1]) / 2 } }' "$1"
}
median "$tmp/ours.all" >"$tmp/ours"
median "$tmp/theirs" >"$tmp/theirs.med"
mv "$tmp/theirs.med" "$tmp/theirs"

cpu=$(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | sed 's/^ *//')
echo "# $cpu, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# medians of ${REPEAT:-3} interleaved runs"
echo "# theirs: lockunlock = LLVM libomptarget 16 host plugin; lookup = std::set + std::shared_mutex (g++ -O2)"
awk 'NR == FNR { theirs[$1] = $2; next }
	FNR == 1 { printf "%-36s %12s %12s %8s\n", "case", "ours ns/op", "theirs ns/op", "ratio" }
	{ t = theirs[$1]; if (t == "") { printf "%-36s %12.1f %12s %8s\n", $1, $2, "-", "-"; next }
	  printf "%-36s %12.1f %12.1f %8.3f\n", $1, $2, t, $2 / t }' "$tmp/theirs" "$tmp/ours"
awk '$1 == "lockunlock/regions=100" { a = $2 } $1 == "lockunlock/regions=100000" { b = $2 }
	END { if (a > 0) printf "# ours, lock+unlock growth from 100 to 100,000 regions: %.2fx\n", b / a }' "$tmp/ours"
