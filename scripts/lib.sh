# Shared settings for the ipoib-rs scripts; sourced, not run.
# Everything that survives between runs lives under $IPOIB_RS_CACHE, outside the repository.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${IPOIB_RS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipoib-rs}
RUST_VERSION=1.95.0
BINDGEN_VERSION=0.71.1
KERNEL_VERSION=6.12
TOOLS=$CACHE/tools
# Build flavour: "default" (the test kernel, with lockdep), "debug" (KASAN, kmemleak,
# lockdep) or "bench" (no lock debugging); one build tree each.
FLAVOUR=${IPOIB_RS_FLAVOUR:-default}
SRC=$CACHE/linux-pristine
KTREE=$CACHE/linux-src
KBUILD=$CACHE/build-$FLAVOUR
OUT=${IPOIB_RS_OUT:-$CACHE/out}

export PATH="$TOOLS/bin:$HOME/.cargo/bin:$PATH"
export RUSTUP_TOOLCHAIN=$RUST_VERSION

log() { printf '[ipoib-rs] %s\n' "$*" >&2; }
die() { printf '[ipoib-rs] error: %s\n' "$*" >&2; exit 1; }
