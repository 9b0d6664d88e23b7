#!/usr/bin/env bash
# Check the exported patch series (scripts/export-patches.sh): it applies in order to a
# fresh pristine tree and yields exactly the files of the tree the suite builds and boots,
# and the kernel's checkpatch.pl --strict finds no error in any patch and nothing that
# scripts/checkpatch.allow does not name. Prints one "ok"/"not ok" line
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
# The cover letter carries no change: it is checked for its placeholders being filled.
cover=$(ls "$series"/0000-cover-letter.patch 2>/dev/null)
if [ -n "$cover" ] && ! grep -q '\*\*\* .* HERE \*\*\*' "$cover"; then
	result 0 "patches: the cover letter has its subject and text"
else
	result 1 "patches: the cover letter has its subject and text"
fi
rm -f "$cover"
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

# checkpatch --strict on every patch: no error, and no finding that the allow list does not
# name with its reason (nor a line of the list that no longer matches).
reports=()
for p in "$series"/*.patch; do
	(cd "$SRC" && perl scripts/checkpatch.pl --no-tree --strict --show-types "$p") >"$p.report" 2>&1
	if ! grep -q "^total: " "$p.report"; then
		echo "# checkpatch did not run on $(basename "$p")"
		result 1 "patches: checkpatch.pl --strict ran on every patch"
		exit 1
	fi
	reports+=("$p:$p.report")
done
out=$(python3 "$REPO/scripts/checkpatch-findings.py" "$REPO/scripts/checkpatch.allow" "${reports[@]}")
echo "$out" | grep "^#"
read -r errors total allowed unexpected stale < <(echo "$out" | tail -n 1)
result "$([ "$errors" = 0 ] && [ "$unexpected" = 0 ] && [ "$stale" = 0 ] && echo 0 || echo 1)" \
	"patches: checkpatch.pl --strict: $errors errors; $total findings, $unexpected of them not in scripts/checkpatch.allow; $stale lines of the list unused"
exit $rc
