#!/usr/bin/env bash
# Install everything ipoib-rs needs to build and test on Debian 12 (run as root).
# Idempotent: each step checks first and returns quickly when nothing is missing.
# rustup is installed from Debian where Debian packages it (Debian 13); on Debian 12, which
# does not, this stops and prints the command of the official installer to run first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

CARGO_FUZZ_VERSION=0.13.1
APT_PACKAGES=(
	linux-source-6.12 clang lld llvm libclang-dev bc flex bison libelf-dev libssl-dev
	cpio xz-utils kmod make rsync patch qemu-system-x86 busybox-static iproute2
	rdma-core ibverbs-utils ibverbs-providers libibverbs-dev rdmacm-utils perftest iperf3 netperf ethtool
	gnuplot-nox linux-perf opensm infiniband-diags python3
)

# netperf lives in Debian's non-free component; add it to the sources when missing.
enable_non_free() {
	local f=/etc/apt/sources.list.d/debian.sources
	if [ -f "$f" ]; then
		if ! grep -Eq '^Components:.*\bnon-free\b' "$f"; then
			log "adding the non-free component to $f"
			sed -i -E '/^Components:/{/\bnon-free\b/!s/$/ non-free/}' "$f"
			return 0
		fi
	elif ! grep -Eqs '^deb .*\bnon-free\b' /etc/apt/sources.list; then
		log "adding the non-free component to /etc/apt/sources.list"
		sed -i -E '/^deb /{/\bnon-free\b/!s/$/ non-free/}' /etc/apt/sources.list
		return 0
	fi
	return 1
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || die "missing packages (${missing[*]}): run as root"
	enable_non_free || true
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust: the pinned toolchain with the sources of core, plus bindgen. rustup first.
RUSTUP_INSTALLER="curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --default-toolchain none"
if ! command -v rustup >/dev/null; then
	[ "$(id -u)" = 0 ] || die "rustup not found: run as root, or install it with: $RUSTUP_INSTALLER"
	apt-get update -qq
	if apt-cache policy rustup 2>/dev/null | grep -Eq '^ *Candidate: [0-9]'; then
		log "apt-get install rustup"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rustup >/dev/null
		hash -r
	fi
	command -v rustup >/dev/null ||
		die "rustup not found and this Debian has no package of it: run  $RUSTUP_INSTALLER  then run this again"
fi
if ! rustup run "$RUST_VERSION" rustc --version >/dev/null 2>&1 ||
	! [ -d "$(rustup run "$RUST_VERSION" rustc --print sysroot)/lib/rustlib/src/rust/library" ]; then
	log "rustup toolchain install $RUST_VERSION"
	rustup toolchain install "$RUST_VERSION" --profile minimal \
		--component rust-src,rustfmt,clippy >/dev/null
fi
if ! "$TOOLS/bin/bindgen" --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
	log "cargo install bindgen-cli $BINDGEN_VERSION"
	cargo +"$RUST_VERSION" install --locked --quiet --root "$TOOLS" \
		bindgen-cli --version "$BINDGEN_VERSION"
fi
# cargo fuzz, for the wire-format fuzzing step of the test suite.
if ! "$TOOLS/bin/cargo-fuzz" --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
	log "cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
	cargo +"$RUST_VERSION" install --locked --quiet --root "$TOOLS" \
		cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
log "set-up complete"
