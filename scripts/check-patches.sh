#!/usr/bin/env bash
# Check the exported patch series (scripts/export-patches.sh): it applies in order to a
# fresh pristine tree and yields exactly the files of the tree the suite builds and boots,
# and the kernel's checkpatch.pl finds no error in any patch. Prints one "ok"/"not ok" line
# per check; exits non-zero if one fails.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

series=$(mktemp -d)
fresh=$CACHE/check-tree
trap 'rm -rf "$series" "$fresh"' EXIT
rc=0
result() { # result OK NAME
	if [ "$1" = 0 ]; then echo "ok - $2"; else echo "not ok - $2"; rc=1; fi
}

"$REPO/scripts/export-patches.sh" "$series" 2>/dev/null || {
	result 1 "patches: series exported"
	exit 1
}
n=$(ls "$series" | wc -l)

# A fresh tree: hard links to the pristine sources (patch replaces the files it changes).
rm -rf "$fresh"
cp -al "$SRC" "$fresh"
applied=0
for p in "$series"/*.patch; do
	if ! patch -s -p1 -d "$fresh" --no-backup-if-mismatch <"$p" >/dev/null; then
		echo "# $(basename "$p") does not apply"
		applied=1
		break
	fi
done
same=$applied
if [ "$applied" = 0 ]; then
	touched=$(sed -n 's|^diff --git a/\([^ ]*\) b/.*|\1|p' "$series"/*.patch | sort -u)
	if [ "$touched" != "$(sort "$KTREE/.ipoib-rs-manifest")" ]; then
		echo "# the series and the build tree differ in the files they change:"
		diff <(echo "$touched") <(sort "$KTREE/.ipoib-rs-manifest") | sed 's/^/#   /' | head -n 10
		same=1
	fi
	while read -r f; do
		cmp -s "$fresh/$f" "$KTREE/$f" || { echo "# $f differs from the built tree"; same=1; }
	done <"$KTREE/.ipoib-rs-manifest"
fi
result "$same" "patches: the $n-patch series applies to pristine Linux $KERNEL_VERSION and gives the tree that is built and tested"

errors=0 warnings=0
for p in "$series"/*.patch; do
	out=$(cd "$SRC" && perl scripts/checkpatch.pl --no-tree --terse "$p" 2>&1)
	read -r e w < <(echo "$out" | sed -nE 's/^total: ([0-9]+) errors, ([0-9]+) warnings.*/\1 \2/p')
	if [ -z "${e:-}" ]; then
		echo "# checkpatch did not run on $(basename "$p")"
		e=1 w=0
	fi
	[ "$e" = 0 ] || echo "$out" | grep ERROR | sed 's/^/#   /'
	errors=$((errors + e)) warnings=$((warnings + w))
done
result "$([ "$errors" = 0 ] && echo 0 || echo 1)" "patches: checkpatch.pl: $errors errors ($warnings warnings) in the series"
exit $rc
