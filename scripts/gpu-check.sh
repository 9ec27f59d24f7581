#!/usr/bin/env bash
# gpu-check.sh — the checks for a machine with an NVIDIA GPU (an H200 when
# one is lent). Two steps, because such machines often have no Go toolchain:
#
#   scripts/gpu-check.sh build [DIR]      # here: cgo-free test binaries and the CLI into DIR (default .gpu)
#   scripts/gpu-check.sh run [DIR] [OUT]  # there: run them against the real libcuda, JSON into OUT
#
# `run` executes the CUDA plugin's tests against the machine's real driver
# (OMPALLOC_REAL_CUDA, the real_test.go smoke test: allocations, copies,
# locking, external registrations), the target and kmp tests with the GPU
# as device 0, and `ompalloc bench --json`, which measures pinned vs
# pageable H2D/D2H bandwidth from 4 KiB to 1 GiB, lock/unlock cost per GB
# and small-copy latency with and without the staging pool. Results:
# OUT/tests.log, OUT/bench.json, OUT/info.json, OUT/summary.json.
set -euo pipefail
cmd=${1:-}
dir=${2:-.gpu}

case $cmd in
build)
	mkdir -p "$dir"
	for pkg in target/cuda target kmp alloc; do
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -o "$dir/$(echo "$pkg" | tr / _).test" "./$pkg"
	done
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -o "$dir/ompalloc" ./cmd/ompalloc
	ls -l "$dir"
	;;
run)
	out=${3:-${OUT:-gpu-out}}
	mkdir -p "$out"
	lib=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
	[[ -n $lib ]] || { echo "gpu-check: no libcuda.so.1 on this machine" >&2; exit 1; }
	export OMPALLOC_REAL_CUDA=$lib
	status=0
	{
		for t in "$dir"/*.test; do
			echo "=== $t"
			# The fake-driver tests need gcc; skip cleanly if absent.
			(cd "$(dirname "$t")" && "./$(basename "$t")" -test.v -test.timeout 120s) || status=1
		done
	} >"$out/tests.log" 2>&1
	"$dir/ompalloc" info --json >"$out/info.json" || status=1
	"$dir/ompalloc" bench --json --time 200ms >"$out/bench.json" || status=1
	passed=$(grep -c -- '^--- PASS' "$out/tests.log" || true)
	failed=$(grep -c -- '^--- FAIL' "$out/tests.log" || true)
	printf '{"libcuda":"%s","tests_passed":%d,"tests_failed":%d,"status":%d}\n' \
		"$lib" "$passed" "$failed" "$status" >"$out/summary.json"
	cat "$out/summary.json"
	exit $status
	;;
*)
	sed -n '2,16p' "$0"
	exit 2
	;;
esac
