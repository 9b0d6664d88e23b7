#!/usr/bin/env bash
# Build the kernel after each patch of the exported series (scripts/export-patches.sh), as a
# maintainer applying it one patch at a time would: each must leave a tree that builds, with
# no compiler or Clippy warning that pristine Linux does not give with the same
# configuration. The tree is a fresh pristine copy with its own build directory (under
# $IPOIB_RS_CACHE), configured from config/ipoib-rs.config; options a patch adds (the
# driver's, the rxe fault injection's) are taken up when it brings them. Slow: a full build
# of pristine Linux first (about 12 minutes), then one incremental build per patch; run by
# hand before a series is sent, not by the suite.
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
# And a fresh build directory: the pristine files keep their old times, which objects
# left from a run that had patched them would look newer than.
rm -rf "$tree" "$build"
cp -al "$SRC" "$tree"
mkdir -p "$build"
"${make_[@]}" tinyconfig >/dev/null

# build NAME: configures the tree as the fragment asks (options a patch brings are set once
# it brings them) and builds it; sets $rc, $secs and $out (its messages).
build() {
	(cd "$build" && "$tree/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" \
		"$REPO/config/ipoib-rs.config" >/dev/null)
	"${make_[@]}" olddefconfig >/dev/null
	local start
	start=$(date +%s)
	log "$1: building"
	rc=0
	"${make_[@]}" bzImage modules >"$build/.series-log" 2>&1 || rc=$?
	# kallsyms' notes on the long names of the doctests are not warnings of ours.
	out=$(grep -v -e 'too long for kallsyms' -e 'increase KSYM_NAME_LEN' "$build/.series-log" ||
		true)
	secs=$(($(date +%s) - start))
}

total_start=$(date +%s)
# Linux itself first: what it warns about with this configuration is not the series'.
build "pristine Linux $KERNEL_VERSION"
[ "$rc" = 0 ] || die "pristine Linux does not build (see $build/.series-log)"
baseline=$(grep 'warning:' <<<"$out" | sed 's|^[^ ]*/series-tree/||' || true)
echo "# pristine Linux $KERNEL_VERSION: built in $secs s, $(grep -c . <<<"$baseline") warnings of its own"

failed=0
for p in "$series"/0*.patch; do
	name=$(basename "$p")
	case "$name" in 0000-*) continue ;; esac
	patch -s -p1 -d "$tree" --no-backup-if-mismatch <"$p" || die "$name does not apply"
	build "$name"
	new=$(grep 'warning:' <<<"$out" | sed 's|^[^ ]*/series-tree/||' |
		grep -v -x -F -f <(echo "${baseline:-none}") || true)
	warnings=$(grep -c . <<<"$new" || true)
	if [ "$rc" != 0 ] || [ "$warnings" != 0 ]; then
		echo "not ok - $name: built in $secs s, $warnings new warnings (make exit $rc)"
		{ grep -E 'error' <<<"$out" || true; echo "$new"; } | head -n 20 | sed 's/^/#   /'
		failed=1
	else
		echo "ok - $name: built in $secs s, no new warning"
	fi
done
log "series built patch by patch in $((($(date +%s) - total_start) / 60)) min"
exit $failed
