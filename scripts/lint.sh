#!/usr/bin/env bash
# House rules of ipoib-rs, checked: no text records how the repository was developed
# (scripts/check-words.py: sessions, the log folders of particular runs, what a run showed),
# rustfmt, and no compiler or clippy warning in our Rust code (driver, kernel/ overlay, test
# module). Our files are recompiled with CLIPPY=1 so that an incremental build still shows
# their warnings. Run after scripts/build.sh (the words check alone needs no build).
# Usage: scripts/lint.sh [--fix|--words|--no-words]
#   --fix       rewrites the files with rustfmt instead of checking
#   --words     runs the words check alone
#   --no-words  leaves the words check out (scripts/test.sh runs it as a test of its own)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rc=0
case "${1:-}" in
--words) exec python3 "$REPO/scripts/check-words.py" ;;
--no-words | --fix) ;;
"") python3 "$REPO/scripts/check-words.py" >&2 || rc=1 ;;
*) die "usage: scripts/lint.sh [--fix|--words|--no-words]" ;;
esac

mapfile -t files < <(cd "$REPO" && git ls-files '*.rs' 2>/dev/null || find . -name '*.rs' -not -path './tests/wire/target/*')
cd "$REPO"
fmt=(rustfmt --config-path "$REPO/config/rustfmt.toml" --edition 2021)
if [ "${1:-}" = --fix ]; then
	"${fmt[@]}" "${files[@]}"
	exit 0
fi
if ! "${fmt[@]}" --check "${files[@]}" >/dev/null 2>&1; then
	log "rustfmt: these files need formatting (scripts/lint.sh --fix):"
	"${fmt[@]}" --check -l "${files[@]}" 2>/dev/null | sed 's/^/  /' >&2 || true
	rc=1
fi

# Recompile our files in the kernel tree: touching them makes make rebuild just them (and
# what links them); the build stays incremental.
drv=$KTREE/drivers/infiniband/ulp/ipoib_rs
[ -d "$drv" ] || die "no kernel tree: run scripts/build.sh"
# The overlay's files are ours: every one of them under rust/ of the tree.
mapfile -t overlay < <(cd "$REPO/kernel" && find rust -name '*.rs' | sed "s|^|$KTREE/|")
touch "$drv"/*.rs "$drv"/selftest/*.rs "${overlay[@]}"
out=$(make -C "$KTREE" O="$KBUILD" LLVM=1 CLIPPY=1 -j"$(($(nproc) + 1))" -s bzImage modules 2>&1) || {
	echo "$out" | tail -n 30 >&2
	die "build failed"
}
ours="ipoib_rs/|$(cd "$REPO/kernel" && find rust -type f | paste -sd'|')"
warnings=$(echo "$out" | grep -E -A3 '^(warning|error)' | grep -E "^ *--> .*($ours)" || true)
if [ -n "$warnings" ]; then
	log "compiler/clippy warnings in our code:"
	echo "$out" | grep -E -B1 -A12 '^(warning|error)' >&2
	rc=1
fi
exit $rc
