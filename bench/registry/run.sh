#!/usr/bin/env bash
# Registry benchmarks side by side, in one run:
#   lock+unlock of a contained sub-range at 100 / 10,000 / 100,000 locked
#   4 KiB regions: pinned vs LLVM libomptarget 16 (llvm_omp_target_lock_mem /
#   unlock_mem on its host plugin, device 0);
#   Lookup at 10,000 / 1,000,000 regions, 1 and 2 goroutines: pinned vs
#   std::set + std::shared_mutex (lookup_baseline.cpp, LLVM's lookup).
# Needs clang-16, libomp-16-dev (libomptarget) and g++. Not part of CI.
# Usage: bench/registry/run.sh   (BENCHTIME=2s, ITERS=..., OPS=... to tune)
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

echo "running LLVM libomptarget 16 ..." >&2
LIBOMPTARGET_NEXTGEN_PLUGINS=1 "$tmp/llvm_lock" "${ITERS:-2000000}" >"$tmp/theirs"
echo "running the std::set + std::shared_mutex baseline ..." >&2
"$tmp/lookup_baseline" "${OPS:-4000000}" >>"$tmp/theirs"
echo "running the Go benchmarks ..." >&2
(cd "$root" && go test -run '^$' -bench '^(BenchmarkLockUnlockHit|BenchmarkLookup)$' \
	-benchtime "${BENCHTIME:-1s}" -count 1 ./pinned) >"$tmp/go"

# BenchmarkLockUnlockHit/regions=100-2  N  55.3 ns/op -> lockunlock/regions=100 55.3
awk '/^Benchmark/ && / ns\/op/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	sub(/^BenchmarkLockUnlockHit/, "lockunlock", name); sub(/^BenchmarkLookup/, "lookup", name)
	print name, $3 }' "$tmp/go" >"$tmp/ours"

cpu=$(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | sed 's/^ *//')
echo "# $cpu, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# theirs: lockunlock = LLVM libomptarget 16 host plugin; lookup = std::set + std::shared_mutex (g++ -O2)"
awk 'NR == FNR { theirs[$1] = $2; next }
	FNR == 1 { printf "%-36s %12s %12s %8s\n", "case", "ours ns/op", "theirs ns/op", "ratio" }
	{ t = theirs[$1]; if (t == "") { printf "%-36s %12.1f %12s %8s\n", $1, $2, "-", "-"; next }
	  printf "%-36s %12.1f %12.1f %8.3f\n", $1, $2, t, $2 / t }' "$tmp/theirs" "$tmp/ours"
awk '$1 == "lockunlock/regions=100" { a = $2 } $1 == "lockunlock/regions=100000" { b = $2 }
	END { if (a > 0) printf "# ours, lock+unlock growth from 100 to 100,000 regions: %.2fx\n", b / a }' "$tmp/ours"
