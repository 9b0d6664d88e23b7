#!/usr/bin/env bash
# Build the kernel after each patch of the exported series (scripts/export-patches.sh), as a
# maintainer applying it one patch at a time would: each must leave a tree that builds, with
# no new compiler or Clippy warning. The tree is a fresh pristine copy with its own build
# directory (under $IPOIB_RS_CACHE), configured from config/ipoib-rs.config; options a patch
# adds (the driver's, the rxe fault injection's) are taken up when it brings them. Slow: a
# full build first (about 15 minutes), then one incremental build per patch; run by hand
# before a series is sent, not by the suite.
# Usage: scripts/build-series.sh [SERIES_DIR]   (default: export the series afresh)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

series=${1:-}
if [ -z "$series" ]; then
	series=$(mktemp -d)
	trap 'rm -rf "$series"' EXIT
	"$REPO/scripts/export-patches.sh" "$series" >/dev/null
fi
tree=$CACHE/series-tree
build=$CACHE/series-build
make_=(make -C "$tree" O="$build" LLVM=1 CLIPPY=1 -j"$(($(nproc) + 1))" -s)

# A fresh tree: hard links to the pristine sources (patch replaces the files it changes).
rm -rf "$tree"
cp -al "$SRC" "$tree"
mkdir -p "$build"
rm -f "$build/.config"
"${make_[@]}" tinyconfig >/dev/null
(cd "$build" && "$tree/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" \
	"$REPO/config/ipoib-rs.config" >/dev/null)

failed=0
total_start=$(date +%s)
for p in "$series"/0*.patch; do
	name=$(basename "$p")
	case "$name" in 0000-*) continue ;; esac
	patch -s -p1 -d "$tree" --no-backup-if-mismatch <"$p" || die "$name does not apply"
	# Options the patch brings are asked for by the fragment: set them now.
	(cd "$build" && "$tree/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" \
		"$REPO/config/ipoib-rs.config" >/dev/null)
	"${make_[@]}" olddefconfig >/dev/null
	start=$(date +%s)
	log "$name: building"
	rc=0
	"${make_[@]}" bzImage modules >"$build/.series-log" 2>&1 || rc=$?
	# kallsyms' notes on the long names of the doctests are not warnings of ours.
	out=$(grep -v -e 'too long for kallsyms' -e 'increase KSYM_NAME_LEN' "$build/.series-log" || true)
	warnings=$(grep -c 'warning:' <<<"$out" || true)
	secs=$(($(date +%s) - start))
	if [ "$rc" != 0 ] || [ "$warnings" != 0 ]; then
		echo "not ok - $name: built in $secs s, $warnings warnings (make exit $rc)"
		grep -E 'error|warning:' <<<"$out" | head -n 20 | sed 's/^/#   /'
		failed=1
	else
		echo "ok - $name: built in $secs s, no warning"
	fi
done
log "series built patch by patch in $((($(date +%s) - total_start) / 60)) min"
exit $failed
