#!/usr/bin/env bash
# gpu-check.sh — the checks for a machine with an NVIDIA GPU. Two steps,
# because such machines often have no Go, no C compiler and no source tree:
#
#   scripts/gpu-check.sh build [DIR]      # here: test binaries, the CLI and this script into DIR (default .gpu)
#   DIR/gpu-check.sh run [DIR] [OUT]      # there: run them against the machine's libcuda, results into OUT
#
# Copy DIR alone to the GPU host (it holds this script too); `run` needs only
# bash, coreutils, grep, sed and the driver. GOARCH=arm64 builds for a
# GH200/Grace host.
#
# `run` loads OMPALLOC_CUDA_LIBRARY when set (so the same bundle dry-runs
# against the project's fake libcuda), else libcuda.so.1 as ldconfig finds
# it; OMPALLOC_REAL_CUDA is set to the same file. It runs, each from an empty
# directory (alloc's with OMP_DEFAULT_DEVICE=initial: its tests take the
# default device for the host, whose pinning is mlock and shows in VmLck; the
# GPU stays device 0 for the tests that address it):
#   - the test binaries (target/cuda's real-driver test, target, kmp, alloc,
#     pinned, loader, internal/fakedrv; tests that need a C compiler to build
#     the fake drivers skip, saying so): OUT/tests.log, one line per package;
#   - `ompalloc info --json`: OUT/info.json;
#   - `ompalloc bench --json --svg` with OMPALLOC_PINNED_LIMIT=0 (ompalloc's
#     own cap on pinned bytes would otherwise be the container's small
#     RLIMIT_MEMLOCK, which the NVIDIA driver's pinning does not use): H2D
#     and D2H bandwidth 4 KiB .. 1 GiB from pageable, pinned-allocator and
#     lock_mem'd memory against the driver's own peak in the same run
#     (cuMemAllocHost + cuMemcpy*Async), ours/peak, and small-copy latency
#     with and without the staging pool: OUT/bench.json, OUT/bench.svg.
#     BENCH_TIME (default 200ms per case) and BENCH_SIZES (a list such as
#     4K,64M,1G; default the bench's own) tune it;
#   - where python3 has torch, torch-peak.py: PyTorch's pin_memory() H2D and
#     D2H at the same sizes, in the same run: OUT/torch.json.
# OUT/summary.json: {libcuda, arch, tests_passed, tests_failed,
# tests_skipped, packages_failed, bench_errors (failed h2d, d2h and
# small_copy cases), goals, torch (measured / absent / failed: why),
# status}; status is 0 when every test binary,
# info and bench succeeded and measured transfers, none failing. The goals
# (met / missed / unmeasured) are reported, not enforced.
set -euo pipefail
cmd=${1:-}
dir=${2:-.gpu}

# The packages whose tests go into the bundle.
pkgs=(target/cuda target kmp alloc pinned loader internal/fakedrv)

case $cmd in
build)
	command -v go >/dev/null || { echo "gpu-check: build needs the go tool" >&2; exit 1; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	cd "$(dirname "$0")/.."
	arch=${GOARCH:-amd64}
	for pkg in "${pkgs[@]}"; do
		# -trimpath: nothing in the binaries points into this source tree.
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go test -c -trimpath -ldflags="-s -w" -o "$dir/$(echo "$pkg" | tr / _).test" "./$pkg"
	done
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w" -o "$dir/ompalloc" ./cmd/ompalloc
	cp scripts/gpu-check.sh "$dir/gpu-check.sh"
	cp scripts/torch-peak.py "$dir/torch-peak.py"
	printf 'commit %s\ngo %s\narch linux/%s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
		"$(go env GOVERSION)" "$arch" >"$dir/BUILD"
	ls -l "$dir"
	;;
run)
	[[ -d $dir ]] || { echo "gpu-check: no bundle at $dir (make one with: gpu-check.sh build $dir)" >&2; exit 1; }
	dir=$(cd "$dir" && pwd)
	tests=("$dir"/*.test)
	[[ -e ${tests[0]} && -x $dir/ompalloc ]] || { echo "gpu-check: $dir holds no test binaries or no ompalloc" >&2; exit 1; }
	out=${3:-${OUT:-gpu-out}}
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	lib=${OMPALLOC_CUDA_LIBRARY:-}
	if [[ -z $lib ]] && command -v ldconfig >/dev/null; then
		lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
	fi
	[[ -n $lib && -e $lib ]] || {
		echo "gpu-check: no libcuda.so.1 (ldconfig finds none; set OMPALLOC_CUDA_LIBRARY)" >&2
		exit 1
	}
	export OMPALLOC_CUDA_LIBRARY=$lib OMPALLOC_REAL_CUDA=$lib
	status=0 passed=0 failed=0 skipped=0 pkgfail=()
	: >"$out/tests.log"
	for t in "${tests[@]}"; do
		name=$(basename "$t" .test)
		work=$(mktemp -d)
		log=$out/test-$name.log
		rc=0
		# alloc's tests pin for the default device and read VmLck, which only
		# the host's mlock moves: the host is their default device here.
		defdev=${OMP_DEFAULT_DEVICE:-}
		[[ $name == alloc ]] && defdev=initial
		(cd "$work" && OMP_DEFAULT_DEVICE=$defdev "$t" -test.v -test.count=1 -test.timeout 300s) >"$log" 2>&1 || rc=$?
		rm -rf "$work"
		p=$(grep -c -- '^--- PASS' "$log" || true)
		f=$(grep -c -- '^--- FAIL' "$log" || true)
		s=$(grep -c -- '^--- SKIP' "$log" || true)
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
		if ((rc != 0)); then
			status=1 pkgfail+=("\"$name\"")
		fi
		printf '%-22s rc=%d pass=%d fail=%d skip=%d\n' "$name" "$rc" "$p" "$f" "$s" >>"$out/tests.log"
	done
	cat "$out/tests.log"
	"$dir/ompalloc" info --json >"$out/info.json" 2>"$out/info.err" || status=1
	sizes=()
	[[ -n ${BENCH_SIZES:-} ]] && sizes=(--sizes "$BENCH_SIZES")
	OMPALLOC_PINNED_LIMIT=0 "$dir/ompalloc" bench --json --svg "$out/bench.svg" --time "${BENCH_TIME:-200ms}" "${sizes[@]}" \
		>"$out/bench.json" 2>"$out/bench.err" || status=1
	# A failed transfer case is a failure of the run; goals are reported.
	benchErrors=$(awk '/"group":/ { g = $2 } /"error":/ && g ~ /"(h2d|d2h|small_copy)"/ { n++ } END { print n + 0 }' "$out/bench.json")
	((benchErrors == 0)) || status=1
	if grep -q '"group": "\(h2d\|d2h\|small_copy\)"' "$out/bench.json"; then :; else
		echo "gpu-check: the bench measured no transfers (no device?): see bench.json skipped" >&2
		status=1
	fi
	# PyTorch's pinned copies in the same run, where its Python has torch
	# (reported, never part of the status).
	torch="absent: no python3 with torch"
	if [[ -e $dir/torch-peak.py ]] && command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
		if python3 "$dir/torch-peak.py" "${BENCH_SIZES:-default}" "${BENCH_TIME:-200ms}" >"$out/torch.json" 2>"$out/torch.err"; then
			torch=measured
		else
			torch="failed: $({ cat "$out/torch.err"; grep '"error"' "$out/torch.json"; } 2>/dev/null | grep . | tail -n 1 | tr -d '"\\' | sed 's/^ *//')"
		fi
	fi
	goals=$(sed -n '/^  "goals": \[/,/^  \],\{0,1\}$/p' "$out/bench.json" | sed '1s/.*/[/; $s/.*/]/')
	[[ -n $goals ]] || goals=[]
	arch=$(sed -n 's/^  "arch": "\(.*\)",$/\1/p' "$out/info.json")
	(
		IFS=,
		printf '{"libcuda":"%s","arch":"%s","tests_passed":%d,"tests_failed":%d,"tests_skipped":%d,"packages_failed":[%s],' \
			"$lib" "$arch" "$passed" "$failed" "$skipped" "${pkgfail[*]}"
	) >"$out/summary.json"
	printf '"bench_errors":%d,"goals":%s,"torch":"%s","status":%d}\n' "$benchErrors" "$goals" "$torch" "$status" >>"$out/summary.json"
	cat "$out/summary.json"
	exit $status
	;;
*)
	sed -n '2,/^set -euo/{/^#/p}' "$0"
	exit 2
	;;
esac
