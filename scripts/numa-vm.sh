#!/usr/bin/env bash
# numa-vm.sh — run the NUMA-relevant tests on a multi-node kernel, without
# multi-node hardware: Debian's cloud kernel booted under qemu-system-x86_64
# (TCG, no KVM needed) with four NUMA nodes:
#   node 0, node 1  two CPUs and 1 GiB each (distance 21 between them)
#   node 2          memory only, HMAT of high-bandwidth memory (400 GB/s from
#                   node 0), nearest to node 0
#   node 3          memory only, HMAT of a CXL expander (20 GB/s, 300 ns from
#                   node 1) behind a 64 MiB memory-side cache, nearest to node 1
# and a PCIe device (virtio-rng behind its own host bridge) on node 1.
# The guest is a busybox initramfs with ld-linux and libc (purego binaries
# link them) and CGO_ENABLED=0 -trimpath test binaries of the packages that
# place memory; each runs as `go test` would, in its package folder with its
# testdata. Prints a line per package and one summary line
#   numa-vm: N passed, N failed, N skipped
# (top-level tests), and exits non-zero when any test or package fails, the
# guest does not finish, or it cannot be built. Skips (exit 0) with one line
# only where qemu or the kernel cannot be had.
#
# Usage: scripts/numa-vm.sh [-v] [PKG...]   (default: the packages below)
# Environment:
#   NUMA_VM_CACHE    downloads (kernel and busybox .debs, unpacked), default
#                    ${XDG_CACHE_HOME:-$HOME/.cache}/ompalloc/numa-vm: outside
#                    the work tree, so CI's fresh clones reuse them
#   NUMA_VM_TIMEOUT  seconds the guest may run (default 900)
#   NUMA_VM_RUN      -test.run pattern for every package (default: every
#                    test; of cmd/ompalloc, its info and placement tests)
#   NUMA_VM_KERNEL   a bzImage to boot instead of Debian's package
#   NUMA_VM_APPEND   extra kernel arguments
#   NUMA_VM_TOPOLOGY hmat (default, above); nohmat (the same nodes without
#                    HMAT: internal/numa then classifies by memory tier
#                    alone, and 6.1 puts every node in one tier, so there
#                    high_bw and large_cap are default memory); or tiers
#                    (no HMAT; node 3's memory is soft-reserved at boot,
#                    memmap=%, and onlined through dax_hmem and kmem, which
#                    put it in the kernel's slower dax tier: the memory-tier
#                    path of internal/numa, as CXL memory gets it); or
#                    hbm-cxl (issue 29: a two-socket machine, five nodes:
#                    per socket a CPU+DDR node (0, 1) and a memory-only HBM
#                    node (2 behind socket 0, 3 behind socket 1), and a CXL
#                    node (4, behind socket 0); HMAT gives local HBM 512 GB/s,
#                    DDR 128 GB/s, remote HBM 64 GB/s, CXL 32 GB/s; SLIT
#                    local 10, same-socket HBM 13, remote 21-23, CXL 25/32.
#                    It boots the newest kernel of NUMA_VM_KERNEL_SUITE,
#                    bookworm-backports's 6.12 by default: from 6.10 the
#                    kernel builds memory tiers from HMAT, HBM above DRAM)
#   NUMA_VM_KERNEL_SUITE  the Debian suite whose linux-image-cloud-amd64 to
#                    boot (default: the system's apt sources; hbm-cxl:
#                    <codename>-backports, read through a private apt list
#                    under NUMA_VM_CACHE, on the mirror apt already uses)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

VERBOSE=0
if [[ ${1:-} == -v ]]; then VERBOSE=1; shift; fi
PKGS=("$@")
((${#PKGS[@]})) || PKGS=(internal/numa memspace alloc kmp cmd/ompalloc internal/cgroup internal/reliability)
CACHE=${NUMA_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ompalloc/numa-vm}
TIMEOUT=${NUMA_VM_TIMEOUT:-900}
TOPO=${NUMA_VM_TOPOLOGY:-hmat}

say() { echo "numa-vm: $*" >&2; }
skip() { echo "numa-vm: skipped: $*"; exit 0; }
die() { echo "numa-vm: error: $*"; exit 1; }

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)"
[[ $(uname -m) == x86_64 ]] || skip "the guest's binaries are linux/amd64 and this machine is $(uname -m)"
command -v go >/dev/null || die "the go tool is not on PATH"
command -v dpkg >/dev/null || die "dpkg is not installed"

# fetch PKG: unpack Debian's PKG (its newest version) into $CACHE/PKG once;
# the .deb stays in $CACHE/debs. Prints the folder. apt's options come
# from the array aptx (empty: the system's sources).
aptx=()
fetch() {
	local pkg=$1 x=$CACHE/$1 deb
	if [[ -e $x/.done ]]; then echo "$x"; return; fi
	mkdir -p "$CACHE/debs"
	deb=$(ls "$CACHE"/debs/"${pkg}"_*.deb 2>/dev/null | tail -n1 || true)
	if [[ -z $deb ]]; then
		command -v apt-get >/dev/null || return 1
		(cd "$CACHE/debs" && apt-get "${aptx[@]}" download -q "$pkg" >/dev/null 2>&1) ||
			{ [[ $(id -u) == 0 ]] && apt-get "${aptx[@]}" update -qq >/dev/null 2>&1 &&
				(cd "$CACHE/debs" && apt-get "${aptx[@]}" download -q "$pkg" >/dev/null 2>&1); } || return 1
		deb=$(ls "$CACHE"/debs/"${pkg}"_*.deb | tail -n1)
	fi
	rm -rf "$x" && mkdir -p "$x" && dpkg -x "$deb" "$x" && touch "$x/.done" && echo "$x"
}

# A suite other than the system's (hbm-cxl: backports, for a kernel >=
# 6.10): a private source list on the system's own Debian mirror, its
# package lists under $CACHE, so the system's apt state is left alone.
KSUITE=${NUMA_VM_KERNEL_SUITE:-}
if [[ -z $KSUITE && $TOPO == hbm-cxl ]]; then
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	[[ -n $codename ]] || skip "no kernel: cannot tell this system's Debian codename for its backports"
	KSUITE=$codename-backports
fi
if [[ -n $KSUITE ]]; then
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	mirror=$(apt-get indextargets --format '$(CODENAME) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
		awk -v c="$codename" '$1 == c { print $2; exit }' || true)
	[[ -n $mirror ]] || skip "no kernel: apt has no source for $codename to take $KSUITE from"
	al=$CACHE/apt-$KSUITE
	mkdir -p "$al/lists/partial" "$al/cache/archives/partial"
	echo "deb $mirror $KSUITE main" >"$al/sources.list"
	aptx=(-o "Dir::Etc::SourceList=$al/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$al/lists" -o "Dir::Cache=$al/cache")
	if ! ls "$al"/lists/*_Packages >/dev/null 2>&1; then
		apt-get "${aptx[@]}" update -qq >/dev/null 2>&1 || true
	fi
fi
kernel=${NUMA_VM_KERNEL:-}
if [[ -z $kernel && -n $KSUITE ]]; then
	image=$(apt-cache "${aptx[@]}" depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1 || true)
	[[ -n $image ]] || skip "no kernel: $KSUITE's linux-image-cloud-amd64 is not known to apt here"
	kx=$(fetch "$image") || skip "no kernel: cannot download $KSUITE's $image"
	aptx=()
	kernel=$(ls "$kx"/boot/vmlinuz-* | head -n1)
fi
if [[ -z $kernel ]]; then
	# linux-image-cloud-amd64 is a metapackage: its dependency names the image.
	image=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1 || true)
	if [[ -z $image ]] && [[ $(id -u) == 0 ]]; then
		apt-get update -qq >/dev/null 2>&1 || true
		image=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1 || true)
	fi
	[[ -n $image ]] || image=$(cd "$CACHE" 2>/dev/null && ls -d linux-image-[0-9]* 2>/dev/null | tail -n1 || true)
	[[ -n $image ]] || skip "no kernel: Debian's linux-image-cloud-amd64 is not known to apt here"
	kx=$(fetch "$image") || skip "no kernel: cannot download Debian's $image"
	kernel=$(ls "$kx"/boot/vmlinuz-* | head -n1)
fi
[[ -r $kernel ]] || skip "no kernel at $kernel"
kver=$(basename "$kernel" | sed 's/^vmlinuz-//')

# Debian's static busybox, unpacked (it also writes the initramfs: cpio).
bx=$(fetch busybox-static) || skip "no busybox: cannot download Debian's busybox-static"
busybox=$bx/bin/busybox

work=$(mktemp -d "${TMPDIR:-/tmp}/numa-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/root
mkdir -p "$rootfs"/{bin,dev,proc,sys,tmp,src,lib64,lib/x86_64-linux-gnu}
cp "$busybox" "$rootfs/bin/busybox"

# The test binaries (and the CLI, which cmd/ompalloc's tests run), built
# cgo-free and without paths, with each package's testdata.
start=$SECONDS
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
for p in "${PKGS[@]}"; do
	mkdir -p "$rootfs/src/$p"
	go test -c -trimpath -o "$rootfs/src/$p/pkg.test" "./$p" || die "building the tests of $p failed"
	[[ -e $rootfs/src/$p/pkg.test ]] && echo "$p" >>"$rootfs/src/pkgs" # none: no test files
	# cmd/ompalloc: the CLI's info and placement, not its benchmarks (they
	# measure speed, minutes under TCG, nothing NUMA).
	[[ $p == cmd/ompalloc ]] && echo '^(TestInfo|TestWriteNUMA|TestPool|TestPlaceOnNode|TestExplain|TestUsage|TestHelp)' >"$rootfs/src/$p/run"
	# internal/reliability: its tests with real memory cgroups (the guest
	# mounts cgroup2 with the memory controller; the machines CI and
	# developers use may have v1 only).
	[[ $p == internal/reliability ]] && echo '^TestCgroup' >"$rootfs/src/$p/run"
done
# Every testdata folder where the repository has it (tests read their
# neighbours' fixtures, as memspace reads internal/numa's).
git ls-files -z '*testdata/*' | xargs -0 -I{} cp -P --parents {} "$rootfs/src/"
go build -trimpath -o "$rootfs/bin/ompalloc" ./cmd/ompalloc || die "building cmd/ompalloc failed"
# The C library the binaries link dynamically (purego's fakecgo).
for lib in $(ldd "$rootfs/bin/ompalloc" | grep -o '/[^ ]*'); do
	cp -L "$lib" "$rootfs/$lib"
done
build_s=$((SECONDS - start))

# tiers: the dax modules (the kernel's own; no depmod needed: they depend
# on nothing that is a module).
if [[ $TOPO == tiers ]]; then
	mods=$(dirname "$kernel")/../lib/modules/$kver/kernel/drivers/dax
	mkdir -p "$rootfs/mod"
	for m in device_dax.ko hmem/dax_hmem.ko kmem.ko; do
		cp "$mods/$m" "$rootfs/mod/" 2>/dev/null || die "no $m in the kernel package (NUMA_VM_TOPOLOGY=tiers needs Debian's)"
	done
fi

cat >"$rootfs/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
# cgroup v2, for the tests of the pinned limit against real memory groups
# (internal/reliability's TestCgroup*): the init's root group may enable
# the memory controller for groups below it.
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "NUMAVM cgroup2: mount failed"
ulimit -l unlimited
say() { echo "NUMAVM $*"; }
# tiers: node 3's soft-reserved memory, a dax device (dax_hmem), becomes
# system RAM (kmem) in the kernel's dax memory tier, as daxctl
# reconfigure-device --mode=system-ram does.
if grep -q 'numavm.tiers' /proc/cmdline; then
	for m in device_dax dax_hmem kmem; do insmod /mod/$m.ko || say "insmod $m failed"; done
	for d in $(ls /sys/bus/dax/devices 2>/dev/null); do
		echo $d >/sys/bus/dax/drivers/device_dax/unbind
		echo $d >/sys/bus/dax/drivers/kmem/new_id
		say "tiers: $d (node $(cat /sys/bus/dax/devices/$d/target_node)) onlined through kmem"
	done
	for b in /sys/devices/system/memory/memory*/state; do
		[ "$(cat $b)" = offline ] && echo online_movable >$b
	done
fi
# What the kernel says, for the log: nodes, tiers, HMAT, the PCI device.
for n in /sys/devices/system/node/node[0-9]*; do
	a=$n/access0/initiators
	say "$(basename $n): cpus=$(cat $n/cpulist) mem=$(awk '/MemTotal/ {print $4$5}' $n/meminfo) dist=$(cat $n/distance | tr ' ' ,) bw=$(cat $a/read_bandwidth 2>/dev/null) lat=$(cat $a/read_latency 2>/dev/null) init=$(ls $a 2>/dev/null | grep node | tr '\n' ,)"
done
say "cgroup2: controllers $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do [ -e $t/nodelist ] && say "$(basename $t): $(cat $t/nodelist)"; done
for d in /sys/bus/pci/devices/*; do
	[ "$(cat $d/vendor):$(cat $d/device)" = 0x1af4:0x1044 ] && say "pci $(basename $d) numa_node=$(cat $d/numa_node)"
done
# NUMA_VM_SYSFS: the kernel's node tree, for internal/numa's fixtures
# (files as they read, symlinks as links).
if grep -q 'numavm.sysfs' /proc/cmdline; then
	for f in $(find /sys/devices/system/node /sys/devices/virtual/memory_tiering /sys/kernel/mm/hugepages /sys/kernel/mm/transparent_hugepage/enabled $(ls -d /sys/bus/pci/devices/*/numa_node) \
		\( -name 'node[0-9]*' -o -name cpulist -o -name meminfo -o -name distance -o -name online -o -name possible -o -name has_cpu -o -name has_memory -o -name 'read_*' -o -name 'write_*' -o -name 'nr_hugepages' -o -name free_hugepages -o -name nodelist -o -name size -o -name indexing -o -name line_size -o -name write_policy -o -name enabled -o -name numa_node -o -name 'hugepages-*' -o -name 'memory_tier*' \) 2>/dev/null); do
		case $f in */node[0-9]*/node[0-9]*/*|*/memory[0-9]*|*/subsystem/*) continue ;; esac
		if [ -L $f ] && echo $f | grep -q initiators/node; then echo "NUMAVM-SYSFS L $f $(readlink $f)"
		elif [ -f $f ]; then echo "NUMAVM-SYSFS F $f"; sed 's/^/NUMAVM-SYSFS | /' $f
		fi
	done
fi
# Huge pages on every node, after compacting (so each node has them).
echo 3 >/proc/sys/vm/drop_caches; echo 1 >/proc/sys/vm/compact_memory
for h in /sys/devices/system/node/node[01]/hugepages/hugepages-2048kB/nr_hugepages; do echo 16 >$h; done
say "hugepages: $(cat /sys/devices/system/node/node[0-9]*/hugepages/hugepages-2048kB/nr_hugepages | tr '\n' ' ')"
run=$(sed -n 's/.*numavm.run=\([^ ]*\).*/\1/p' /proc/cmdline)
verbose=$(grep -c 'numavm.v' /proc/cmdline)
for p in $(cat /src/pkgs); do
	cd /src/$p
	s=$(date +%s)
	r=$run
	[ -z "$r" ] && [ -e run ] && r=$(cat run)
	OMPALLOC_TEST_CLI=/bin/ompalloc ./pkg.test -test.v -test.short -test.count=1 -test.timeout=600s ${r:+-test.run=$r} >/tmp/out 2>&1
	rc=$?
	pass=$(grep -c '^--- PASS' /tmp/out); fail=$(grep -c '^--- FAIL' /tmp/out); skip=$(grep -c '^--- SKIP' /tmp/out)
	say "pkg $p rc=$rc passed=$pass failed=$fail skipped=$skip secs=$(($(date +%s) - s))"
	if [ $verbose != 0 ]; then
		grep -v '^=== \(RUN\|PAUSE\|CONT\|NAME\)' /tmp/out | sed 's/^/  | /'
	elif [ $rc != 0 ]; then
		grep -v '^=== \(RUN\|PAUSE\|CONT\|NAME\)\|^ *--- \(PASS\|SKIP\)\|^PASS$' /tmp/out | sed 's/^/  | /' | tail -n 400
	fi
done
say "done"
poweroff -f
INIT
chmod +x "$rootfs/init"
(cd "$rootfs" && find . | "$busybox" cpio -o -H newc 2>/dev/null) >"$work/initrd"

# The machine. HMAT needs a latency and a bandwidth for every
# initiator/target pair.
mem=(-object memory-backend-ram,id=m0,size=1G -object memory-backend-ram,id=m1,size=1G)
numa=(-numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1)
append="console=ttyS0 panic=-1 mitigations=off numa_balancing=disable quiet rdinit=/init"
nnodes=4
if [[ $TOPO == hbm-cxl ]]; then
	# Two sockets: nodes 2 and 3 are each socket's HBM (512 MiB), node 4
	# CXL memory behind socket 0 (1 GiB); 4 GiB in all.
	mem+=(-object memory-backend-ram,id=m2,size=512M -object memory-backend-ram,id=m3,size=512M
		-object memory-backend-ram,id=m4,size=1G)
	numa+=(-numa node,nodeid=2,memdev=m2,initiator=0 -numa node,nodeid=3,memdev=m3,initiator=1
		-numa node,nodeid=4,memdev=m4,initiator=0)
	machine=q35,hmat=on
	nnodes=5
	#          target: 0 (DDR) 1 (DDR) 2 (HBM) 3 (HBM) 4 (CXL)
	lat0=(80 140 90 160 250) bw0=(128G 64G 512G 64G 32G)
	lat1=(140 80 160 90 330) bw1=(64G 128G 64G 512G 32G)
	for tgt in 0 1 2 3 4; do
		numa+=(-numa "hmat-lb,initiator=0,target=$tgt,hierarchy=memory,data-type=access-latency,latency=${lat0[$tgt]}"
			-numa "hmat-lb,initiator=0,target=$tgt,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bw0[$tgt]}"
			-numa "hmat-lb,initiator=1,target=$tgt,hierarchy=memory,data-type=access-latency,latency=${lat1[$tgt]}"
			-numa "hmat-lb,initiator=1,target=$tgt,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bw1[$tgt]}")
	done
	numa+=(-numa "dist,src=0,dst=1,val=21" -numa "dist,src=0,dst=2,val=13" -numa "dist,src=1,dst=3,val=13"
		-numa "dist,src=0,dst=3,val=23" -numa "dist,src=1,dst=2,val=23" -numa "dist,src=2,dst=3,val=22"
		-numa "dist,src=0,dst=4,val=25" -numa "dist,src=1,dst=4,val=32" -numa "dist,src=2,dst=4,val=28"
		-numa "dist,src=3,dst=4,val=34")
elif [[ $TOPO == nohmat || $TOPO == tiers ]]; then
	mem+=(-object memory-backend-ram,id=m2,size=1G -object memory-backend-ram,id=m3,size=1G)
	numa+=(-numa node,nodeid=2,memdev=m2 -numa node,nodeid=3,memdev=m3)
	machine=q35
	# q35 with 4 GiB: nodes 0 and 1 below 2 GiB, nodes 2 and 3 at 4-5 and
	# 5-6 GiB; node 3's range soft-reserved (E820_TYPE_SOFT_RESERVED).
	[[ $TOPO == tiers ]] && append+=" memmap=1G%0x140000000-1+0xefffffff memhp_default_state=online_movable numavm.tiers"
else
	mem+=(-object memory-backend-ram,id=m2,size=1G -object memory-backend-ram,id=m3,size=1G)
	numa+=(-numa node,nodeid=2,memdev=m2,initiator=0 -numa node,nodeid=3,memdev=m3,initiator=1)
	machine=q35,hmat=on
	#          target: 0        1        2 (HBM)   3 (CXL)
	lat0=(80 140 90 250) bw0=(100G 50G 400G 30G)
	lat1=(140 80 150 300) bw1=(50G 100G 200G 20G)
	for tgt in 0 1 2 3; do
		numa+=(-numa "hmat-lb,initiator=0,target=$tgt,hierarchy=memory,data-type=access-latency,latency=${lat0[$tgt]}"
			-numa "hmat-lb,initiator=0,target=$tgt,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bw0[$tgt]}"
			-numa "hmat-lb,initiator=1,target=$tgt,hierarchy=memory,data-type=access-latency,latency=${lat1[$tgt]}"
			-numa "hmat-lb,initiator=1,target=$tgt,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bw1[$tgt]}")
	done
	numa+=(-numa hmat-cache,node-id=3,size=64M,level=1,associativity=direct,policy=write-back,line=64)
fi
dist() { numa+=(-numa "dist,src=$1,dst=$2,val=$3"); }
[[ $TOPO == hbm-cxl ]] || { dist 0 1 21; dist 0 2 14; dist 0 3 24; dist 1 2 24; dist 1 3 14; dist 2 3 28; }
# qemu 7.2's TCG with -cpu max: Debian's 6.12 kernel crashed while
# booting in 12 of 14 tries, with cx16 off in none of 14 (NOTES.md 14).
cpu=max
if [[ $kver =~ ^([0-9]+)\.([0-9]+) ]] && ((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2] >= 6010)); then cpu=max,cx16=off; fi
[[ -n ${NUMA_VM_RUN:-} ]] && append+=" numavm.run=$NUMA_VM_RUN"
[[ -n ${NUMA_VM_SYSFS:-} ]] && append+=" numavm.sysfs"
((VERBOSE)) && append+=" numavm.v"
append+=" ${NUMA_VM_APPEND:-}"

log=$work/console.log
say "kernel $kver ($TOPO topology), ${#PKGS[@]} packages; built in ${build_s}s, initramfs $(($(stat -c %s "$work/initrd") >> 20)) MiB"
start=$SECONDS
rc=0
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -machine "$machine" -cpu "$cpu" \
	-smp 4,sockets=2,cores=2 -m 4G "${mem[@]}" "${numa[@]}" \
	-device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0 \
	-device pcie-root-port,id=rp1,bus=pxb1,chassis=1,slot=1 -device virtio-rng-pci,bus=rp1 \
	-kernel "$kernel" -initrd "$work/initrd" -append "$append" \
	-display none -serial file:"$log" -monitor none -no-reboot -net none </dev/null || rc=$?
secs=$((SECONDS - start))
[[ -n ${NUMA_VM_LOG:-} ]] && cp "$log" "$NUMA_VM_LOG"
if [[ -n ${NUMA_VM_SYSFS:-} ]]; then
	# Rebuild the guest's sysfs tree under $NUMA_VM_SYSFS (a fixture root).
	tr -d '\r' <"$log" | awk -v root="$NUMA_VM_SYSFS" '
		/^NUMAVM-SYSFS F / { f = root $3; sub(/\/[^\/]*$/, "", f); system("mkdir -p \"" f "\""); out = root $3; printf "" > out; next }
		/^NUMAVM-SYSFS \| / { sub(/^NUMAVM-SYSFS \| /, ""); print >> out; next }
		/^NUMAVM-SYSFS L / { d = root $3; sub(/\/[^\/]*$/, "", d); system("mkdir -p \"" d "\" && ln -sfn \"" $4 "\" \"" root $3 "\"") }'
	echo "numa-vm: the guest's sysfs is in $NUMA_VM_SYSFS"
fi

tr -d '\r' <"$log" | sed -n 's/^NUMAVM //p' | grep -v '^pkg \|^done' | sed 's/^/numa-vm: guest: /'
tr -d '\r' <"$log" | grep '^  | ' || true
passed=0 failed=0 skipped=0 bad=0
while read -r _ _ p r ps fl sk sc; do
	r=${r#rc=} ps=${ps#passed=} fl=${fl#failed=} sk=${sk#skipped=}
	echo "numa-vm: $p: rc=$r, $ps passed, $fl failed, $sk skipped, ${sc#secs=} s"
	passed=$((passed + ps)) failed=$((failed + fl)) skipped=$((skipped + sk))
	[[ $r == 0 ]] || bad=$((bad + 1))
done < <(tr -d '\r' <"$log" | grep '^NUMAVM pkg ')
ran=$(tr -d '\r' <"$log" | grep -c '^NUMAVM pkg ' || true)
if ! tr -d '\r' <"$log" | grep -q '^NUMAVM done'; then
	tail -n 40 "$log" | sed 's/^/numa-vm: console: /'
	echo "numa-vm: the guest did not finish (qemu rc=$rc after ${secs}s; timeout ${TIMEOUT}s)"
	bad=$((bad + 1))
fi
[[ $ran == $(wc -l <"$rootfs/src/pkgs") ]] || bad=$((bad + 1))
echo "numa-vm: kernel $kver, $TOPO topology, $nnodes nodes, $ran packages, guest ${secs}s"
echo "numa-vm: $passed passed, $failed failed, $skipped skipped"
((bad == 0 && failed == 0))
