#!/usr/bin/env bash
# provision-drivers.sh [DIR] [ARCH] — make the real GPU driver libraries
# available on a machine without a GPU, for the integration tests
# (internal/plugin/cuda real_test.go, internal/plugin/amdgpu):
#   - NVIDIA: Debian's libcuda1 (non-free) is downloaded and unpacked into DIR,
#     never installed (its dependencies want kernel modules). A private apt
#     configuration under DIR/apt fetches the non-free index only, so the
#     system's apt state is not touched.
#   - ROCm: libhsa-runtime64-1 (main) is installed with apt-get unless
#     `ldconfig -p` already lists libhsa-runtime64.so.1.
# With ARCH (a Debian architecture such as arm64) other than the machine's,
# libcuda1 of that architecture is unpacked into DIR/libcuda1-ARCH, for test
# binaries run under qemu-user; the HSA runtime is not provisioned for it
# (OMPALLOC_REAL_HSA is printed empty: ROCm's arm64 runtime is not a target).
# Idempotent: a library already present is kept. Prints the paths, as
#   OMPALLOC_REAL_CUDA=<path to libcuda.so.1>
#   OMPALLOC_REAL_HSA=<path to libhsa-runtime64.so.1>
# on stdout (so `eval "$(scripts/provision-drivers.sh)"` works); progress goes
# to stderr. Exits non-zero with a message naming the failed step.
set -euo pipefail

DIR=${1:-.cache/drivers}
NATIVE=$(dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH=${2:-$NATIVE}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

say() { echo "provision-drivers: $*" >&2; }
die() { say "error: $*"; exit 1; }

# as_root runs a command as root (directly, or through sudo when available).
as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"
	elif command -v sudo >/dev/null; then sudo "$@"
	else die "need root to run: $*"
	fi
}

# debian_mirror prints the first Debian archive URI configured for apt (not
# the security archive), from deb822 .sources files or one-line lists.
debian_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/ && $i ~ /debian/) { print $i; exit } }' "$f")
		[ -n "$uri" ] && { echo "$uri"; return; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { if ($i !~ /security/ && $i ~ /debian/) print $i; break } }' "$f" | head -n1)
		[ -n "$uri" ] && { echo "$uri"; return; }
	done
	return 1
}

provision_cuda() {
	local x="$DIR/libcuda1" lib lists=lists cache=cache archopts=()
	if [ "$ARCH" != "$NATIVE" ]; then
		x="$DIR/libcuda1-$ARCH" lists="lists-$ARCH" cache="cache-$ARCH"
		archopts=(-o "APT::Architecture=$ARCH" -o "APT::Architectures::=$ARCH")
	fi
	lib=$(find "$x" -name libcuda.so.1 -path '*nvidia/current*' 2>/dev/null | head -n1 || true)
	if [ -n "$lib" ] && [ -e "$lib" ]; then
		say "libcuda1 already unpacked: $lib"
		echo "$lib"
		return
	fi
	command -v apt-get >/dev/null || die "apt-get not found: cannot fetch Debian's libcuda1"
	command -v dpkg >/dev/null || die "dpkg not found: cannot unpack libcuda1"
	local mirror suite keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	mirror=$(debian_mirror) || die "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/"
	suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	suite=${suite:-bookworm}
	[ -r "$keyring" ] || die "$keyring missing (package debian-archive-keyring)"
	local a="$DIR/apt"
	mkdir -p "$a/sources" "$a/$lists/partial" "$a/$cache/archives/partial" "$a/pkgs"
	cat >"$a/sources/nf.sources" <<SRC
Types: deb
URIs: $mirror
Suites: $suite
Components: non-free
Signed-By: $keyring
SRC
	local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$a/sources"
		-o "Dir::State::Lists=$a/$lists" -o "Dir::Cache=$a/$cache"
		-o "Dir::Cache::archives=$a/$cache/archives" "${archopts[@]}")
	[ "$(id -u)" = 0 ] && opts+=(-o APT::Sandbox::User=root)
	say "fetching the non-free index of $mirror $suite for $ARCH"
	apt-get "${opts[@]}" -q update >&2 || die "apt-get update of the non-free index failed"
	say "downloading libcuda1:$ARCH"
	(cd "$a/pkgs" && rm -f libcuda1_*_"$ARCH".deb && apt-get "${opts[@]}" -q download "libcuda1:$ARCH" >&2) ||
		die "apt-get download libcuda1:$ARCH failed"
	local deb
	deb=$(ls "$a/pkgs"/libcuda1_*_"$ARCH".deb 2>/dev/null | head -n1)
	[ -n "$deb" ] || die "apt-get download left no libcuda1_*.deb in $a/pkgs"
	rm -rf "$x.tmp"
	dpkg -x "$deb" "$x.tmp" || die "dpkg -x $deb failed"
	rm -rf "$x"
	mv "$x.tmp" "$x"
	lib=$(find "$x" -name libcuda.so.1 -path '*nvidia/current*' | head -n1)
	[ -n "$lib" ] && [ -e "$lib" ] || die "$deb holds no nvidia/current/libcuda.so.1"
	say "unpacked $(basename "$deb")"
	echo "$lib"
}

provision_hsa() {
	local lib
	lib=$(ldconfig -p | awk '/libhsa-runtime64\.so\.1 / { print $NF; exit }')
	if [ -z "$lib" ]; then
		command -v apt-get >/dev/null || die "apt-get not found: cannot install libhsa-runtime64-1"
		say "installing libhsa-runtime64-1"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends libhsa-runtime64-1 >&2 ||
			{ as_root apt-get -q update >&2 && as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends libhsa-runtime64-1 >&2; } ||
			die "apt-get install libhsa-runtime64-1 failed"
		lib=$(ldconfig -p | awk '/libhsa-runtime64\.so\.1 / { print $NF; exit }')
		[ -n "$lib" ] || die "libhsa-runtime64-1 installed but ldconfig -p lacks libhsa-runtime64.so.1"
	else
		say "libhsa-runtime64.so.1 already installed: $lib"
	fi
	echo "$lib"
}

cuda=$(provision_cuda)
hsa=
if [ "$ARCH" = "$NATIVE" ]; then
	hsa=$(provision_hsa)
fi
echo "OMPALLOC_REAL_CUDA=$cuda"
echo "OMPALLOC_REAL_HSA=$hsa"
