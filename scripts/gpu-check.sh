#!/usr/bin/env bash
# gpu-check.sh — the checks for a machine with an NVIDIA GPU. Two steps,
# because such machines often have no Go, no C compiler and no source tree:
#
#   scripts/gpu-check.sh build [DIR]      # here: test binaries, the CLI, the probe and this script into DIR (default .gpu)
#   DIR/gpu-check.sh run [DIR] [OUT]      # there: run them against the machine's libcuda, results into OUT
#   DIR/gpu-check.sh probe [DIR] [OUT]    # there, in minutes: only the probe's questions, OUT/probe.json
#
# Copy DIR alone to the GPU host (it holds this script too); `run` needs only
# bash, coreutils (timeout among them), grep, sed, awk and the driver.
# GOARCH=arm64 builds for a GH200/Grace host.
#
# `run` and `probe` load OMPALLOC_CUDA_LIBRARY when set (so the same bundle
# dry-runs against the project's fake libcuda), else libcuda.so.1 as
# `ldconfig -p` finds it for the bundle's architecture (x86-64 or AArch64:
# a 32-bit compat entry listed first is passed over); OMPALLOC_REAL_CUDA is
# set to the same file. The test binaries remove the user's OMP_* and
# OMPALLOC_* settings themselves (internal/testenv), so a GPU container's
# OMPALLOC_PINNED_LIMIT=0 does not change them. Every step runs under
# `timeout` (TEST_TIMEOUT, INFO_TIMEOUT, BENCH_TIMEOUT, PROBE_TIMEOUT,
# TORCH_TIMEOUT, seconds: 330, 120, 1800, 600, 900); one that runs out
# fails the run (torch's is reported only). `run` runs,
# each from an empty directory (alloc's with OMP_DEFAULT_DEVICE=initial:
# its tests take the default device for the host, whose pinning is mlock and
# shows in VmLck; the GPU stays device 0 for the tests that address it):
#   - the test binaries (internal/plugin/cuda's real-driver test, target, kmp, alloc,
#     internal/pinreg (the registry), internal/dl, internal/fakedrv; tests that need a C compiler to build
#     the fake drivers skip, saying so): OUT/tests.log, one line per package;
#   - `ompalloc info --json`: OUT/info.json;
#   - `ompalloc bench --json --svg` with OMPALLOC_PINNED_LIMIT=0 (ompalloc's
#     own cap on pinned bytes would otherwise be the container's small
#     RLIMIT_MEMLOCK, which the NVIDIA driver's pinning does not use): H2D
#     and D2H bandwidth 4 KiB .. 1 GiB from pageable, pinned-allocator and
#     lock_mem'd memory against the driver's own peak in the same run
#     (cuMemAllocHost + cuMemcpy*Async), ours/peak, every host buffer on the
#     GPU's NUMA node (bench.json's device.host_nodes says where each really
#     is), small-copy latency with and without the staging pool, and device
#     alloc+free of 1 MiB through the device pool (the driver's
#     stream-ordered allocator where the GPU has memory pools) against
#     cuMemAlloc+cuMemFree:
#     OUT/bench.json, OUT/bench.svg, progress lines in OUT/bench.err.
#     It is the --full run. BENCH_TIME (default 200ms per run of a case),
#     BENCH_REPEAT (runs per case, default 3) and BENCH_SIZES (a list such
#     as 4K,64M,1G; default the bench's own) tune it;
#   - gpuprobe, the driver's answers to the questions the design rests on
#     (mixed and adjacent registrations, shared pages, PORTABLE DMA timing,
#     release while busy, the caller's context, pinned/peak per node):
#     OUT/probe.json (PROBE_SIZE, default 256M, sizes its buffers);
#   - where python3 has torch, torch-peak.py: PyTorch's pin_memory() H2D and
#     D2H at the same sizes, in the same run: OUT/torch.json;
#   - examples/pipeline on device 0 (OMPALLOC_PINNED_LIMIT=0, as the bench):
#     pinned buffers filled while earlier batches' copies run, two queues
#     ordered by events; its output in OUT/pipeline.log and its result line
#     in OUT/pipeline.json (overlap, the copies' achieved H2D bandwidth from
#     events, the same pinned copy alone as its peak, of_peak), with the
#     bench's h2d driver peak at the batch size added where the bench
#     measured that size (bench_driver_peak_gb_per_s, of_driver_peak; the
#     --full sizes include its 4 MiB). PIPELINE_TIMEOUT (seconds, 120).
# OUT/summary.json: {libcuda, arch, tests_passed, tests_failed,
# tests_skipped, packages_failed, bench_errors (failed h2d, d2h and
# small_copy cases), gpu_node and host_nodes (the GPU's NUMA node, and
# where each transfer series' buffer was), device_alloc ({device_pool:
# driver or size_class, pool_ns, driver_ns}: the 1 MiB device alloc+free
# figures, null when not measured), goals, probe (measured / failed: why), torch
# (measured / absent / failed: why), pipeline (measured / absent / failed:
# why) and pipeline_result (OUT/pipeline.json's object, or null), timed_out
# (the steps that ran out of time), status}; status is 0 when every test
# binary, info, bench, the probe and the pipeline succeeded and the bench
# measured transfers, none failing. The goals
# (met / missed / unmeasured) and the probe's answers are reported, not
# enforced.
set -euo pipefail
cmd=${1:-}
dir=${2:-.gpu}

# The packages whose tests go into the bundle.
pkgs=(internal/plugin/cuda target kmp alloc internal/pinreg internal/dl internal/fakedrv)

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
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w" -o "$dir/gpuprobe" ./internal/cmd/gpuprobe
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w" -o "$dir/pipeline" ./examples/pipeline
	cp scripts/gpu-check.sh "$dir/gpu-check.sh"
	cp scripts/torch-peak.py "$dir/torch-peak.py"
	printf 'commit %s\ngo %s\narch linux/%s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
		"$(go env GOVERSION)" "$arch" >"$dir/BUILD"
	ls -l "$dir"
	;;
run | probe)
	[[ -d $dir ]] || { echo "gpu-check: no bundle at $dir (make one with: gpu-check.sh build $dir)" >&2; exit 1; }
	dir=$(cd "$dir" && pwd)
	tests=("$dir"/*.test)
	if [[ $cmd == run ]]; then
		[[ -e ${tests[0]} && -x $dir/ompalloc ]] || { echo "gpu-check: $dir holds no test binaries or no ompalloc" >&2; exit 1; }
	else
		[[ -x $dir/gpuprobe ]] || { echo "gpu-check: $dir holds no gpuprobe (an older bundle: build it again)" >&2; exit 1; }
	fi
	out=${3:-${OUT:-gpu-out}}
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	lib=${OMPALLOC_CUDA_LIBRARY:-}
	if [[ -z $lib ]] && command -v ldconfig >/dev/null; then
		# The entry of the bundle's architecture: a host may list a 32-bit
		# (libc6) compat library first.
		want=x86-64
		grep -q '^arch linux/arm64$' "$dir/BUILD" 2>/dev/null && want=AArch64
		lib=$(ldconfig -p | awk -v want="$want" '
			/^[ \t]*libcuda\.so\.1 / { if (first == "") first = $NF; if (index($0, "," want ")")) { print $NF; found = 1; exit } }
			END { if (!found && first != "") print first }')
	fi
	[[ -n $lib && -e $lib ]] || {
		echo "gpu-check: no libcuda.so.1 (ldconfig finds none; set OMPALLOC_CUDA_LIBRARY)" >&2
		exit 1
	}
	export OMPALLOC_CUDA_LIBRARY=$lib OMPALLOC_REAL_CUDA=$lib
	timedout=()
	# limited NAME SECONDS DIR CMD...: CMD run in DIR under timeout; a run
	# out of time is recorded in timed_out and fails like any other failure.
	limited() {
		local name=$1 secs=$2 wd=$3 rc=0
		shift 3
		(cd "$wd" && exec timeout -k 10 "$secs" "$@") || rc=$?
		if ((rc == 124 || rc == 137)); then
			timedout+=("\"$name\"")
			echo "gpu-check: $name ran out of its ${secs}s" >&2
		fi
		return $rc
	}
	# The probe: its answers are reported; a probe that cannot finish fails.
	probe="absent: no gpuprobe in the bundle"
	if [[ -x $dir/gpuprobe ]]; then
		work=$(mktemp -d)
		if limited probe "${PROBE_TIMEOUT:-600}" "$work" "$dir/gpuprobe" -lib "$lib" -size "${PROBE_SIZE:-256M}" -o "$out/probe.json" 2>"$out/probe.err"; then
			probe=measured
		else
			probe="failed: $(grep . "$out/probe.err" | tail -n 1 | tr -d '"\\')"
		fi
		rm -rf "$work"
	fi
	if [[ $cmd == probe ]]; then
		cat "$out/probe.json" 2>/dev/null || true
		echo "gpu-check: probe $probe" >&2
		[[ $probe == measured ]]
		exit
	fi
	status=0 passed=0 failed=0 skipped=0 pkgfail=()
	[[ $probe == measured || $probe == absent* ]] || status=1
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
		OMP_DEFAULT_DEVICE=$defdev limited "$name" "${TEST_TIMEOUT:-330}" "$work" "$t" -test.v -test.count=1 -test.timeout 300s >"$log" 2>&1 || rc=$?
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
	limited info "${INFO_TIMEOUT:-120}" . "$dir/ompalloc" info --json >"$out/info.json" 2>"$out/info.err" || status=1
	sizes=()
	[[ -n ${BENCH_SIZES:-} ]] && sizes+=(--sizes "$BENCH_SIZES")
	OMPALLOC_PINNED_LIMIT=0 limited bench "${BENCH_TIMEOUT:-1800}" . "$dir/ompalloc" bench --full --json --svg "$out/bench.svg" \
		--time "${BENCH_TIME:-200ms}" --repeat "${BENCH_REPEAT:-3}" "${sizes[@]}" \
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
		if timeout -k 10 "${TORCH_TIMEOUT:-900}" python3 "$dir/torch-peak.py" "${BENCH_SIZES:-default}" "${BENCH_TIME:-200ms}" >"$out/torch.json" 2>"$out/torch.err"; then
			torch=measured
		else
			torch="failed: $({ cat "$out/torch.err"; grep '"error"' "$out/torch.json"; } 2>/dev/null | grep . | tail -n 1 | tr -d '"\\' | sed 's/^ *//')"
		fi
	fi
	# The pipeline example: a failure is the run's; its figures are reported.
	pipeline="absent: no pipeline in the bundle" presult=null
	if [[ -x $dir/pipeline ]]; then
		work=$(mktemp -d)
		rc=0
		OMP_DEFAULT_DEVICE=0 OMPALLOC_PINNED_LIMIT=0 limited pipeline "${PIPELINE_TIMEOUT:-120}" "$work" "$dir/pipeline" >"$out/pipeline.log" 2>&1 || rc=$?
		rm -rf "$work"
		line=$(sed -n 's/^pipeline: \({.*}\)$/\1/p' "$out/pipeline.log" | tail -n 1)
		if ((rc == 0)) && [[ -n $line ]]; then
			# The bench's driver peak at the batch size, where it measured it.
			bb=$(sed -n 's/.*"batch_bytes":\([0-9]*\).*/\1/p' <<<"$line")
			h2d=$(sed -n 's/.*"h2d_gb_per_s":\([0-9.eE+-]*\).*/\1/p' <<<"$line")
			peak=$(awk -v size="$bb" '
				/"group":/ { g = $0; s = ""; z = "" }
				/"series":/ { s = $0 }
				/"size_bytes":/ { z = $2; sub(/,$/, "", z) }
				/"gb_per_s":/ && g ~ /"h2d"/ && s ~ /"driver peak"/ && z == size { v = $2; sub(/,$/, "", v); print v; exit }' "$out/bench.json" 2>/dev/null || true)
			if [[ -n $peak && -n $h2d ]]; then
				line="${line%\}},\"bench_driver_peak_gb_per_s\":$peak,\"of_driver_peak\":$(awk -v a="$h2d" -v b="$peak" 'BEGIN { if (b > 0) printf "%.4f", a / b; else printf "null" }')}"
			fi
			printf '%s\n' "$line" >"$out/pipeline.json"
			pipeline=measured presult=$line
		else
			pipeline="failed: $({ grep . "$out/pipeline.log" || true; } | tail -n 1 | tr -d '"\\')"
			[[ -n $line ]] || ((rc != 0)) || pipeline="failed: no result line in pipeline.log"
			status=1
		fi
	fi
	if ((${#timedout[@]})); then
		(
			IFS=,
			echo "gpu-check: ran out of time: ${timedout[*]}" | tr -d '"' >&2
		)
	fi
	# Where the bench's host buffers were: the GPU's node, and each series'
	# pages (a series on another node measures the socket link).
	gpunode=$(awk '/^    "numa_node": -?[0-9]+,?$/ { v = $2; sub(/,$/, "", v); print v; exit }' "$out/bench.json")
	hostnodes=$(sed -n '/^    "host_nodes": {$/,/^    }$/p' "$out/bench.json" | sed '1s/.*/{/; $s/.*/}/' | tr -d '\n' | tr -s ' ')
	[[ -n $gpunode ]] || gpunode=null
	[[ -n $hostnodes ]] || hostnodes='{}'
	# Device alloc+free of 1 MiB through the device pool against
	# cuMemAlloc+cuMemFree, measured in the same run.
	devalloc=$(awk '
		/"device_pool":/ { kind = $2; sub(/,$/, "", kind) }
		/"group":/ { g = $2 }
		/"series":/ { s = $2 }
		/"ns_per_op":/ && g == "\"device_alloc\"," { v = $2; sub(/,$/, "", v); ns[s] = v }
		END {
			if (("\"pool\"," in ns) && ("\"driver\"," in ns))
				printf "{\"device_pool\":%s,\"pool_ns\":%s,\"driver_ns\":%s}", (kind == "" ? "null" : kind), ns["\"pool\","], ns["\"driver\","]
			else
				printf "null"
		}' "$out/bench.json")
	goals=$(sed -n '/^  "goals": \[/,/^  \],\{0,1\}$/p' "$out/bench.json" | sed '1s/.*/[/; $s/.*/]/')
	[[ -n $goals ]] || goals=[]
	arch=$(sed -n 's/^  "arch": "\(.*\)",$/\1/p' "$out/info.json")
	(
		IFS=,
		printf '{"libcuda":"%s","arch":"%s","tests_passed":%d,"tests_failed":%d,"tests_skipped":%d,"packages_failed":[%s],' \
			"$lib" "$arch" "$passed" "$failed" "$skipped" "${pkgfail[*]}"
	) >"$out/summary.json"
	(
		IFS=,
		printf '"bench_errors":%d,"gpu_node":%s,"host_nodes":%s,"device_alloc":%s,"goals":%s,"probe":"%s","torch":"%s","pipeline":"%s","pipeline_result":%s,"timed_out":[%s],"status":%d}\n' \
			"$benchErrors" "$gpunode" "$hostnodes" "$devalloc" "$goals" "$probe" "$torch" "$pipeline" "$presult" "${timedout[*]}" "$status"
	) >>"$out/summary.json"
	cat "$out/summary.json"
	exit $status
	;;
*)
	sed -n '2,/^set -euo/{/^#/p}' "$0"
	exit 2
	;;
esac
