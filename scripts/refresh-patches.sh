#!/usr/bin/env bash
# Rewrite kernel/patches/*.patch from the kernel tree: after editing a file that a patch
# touches directly in the tree ($IPOIB_RS_CACHE/linux-src), this captures the edit. Each
# patch keeps the set of files it already touches; the diff is taken against the pristine
# sources. Review the result with `git diff kernel/patches`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -d "$KTREE" ] && [ -d "$SRC" ] || die "no kernel tree: run scripts/build.sh first"
for p in "$REPO"/kernel/patches/*.patch; do
	files=$(sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$p" | sort -u)
	tmp=$(mktemp)
	for f in $files; do
		diff -u --label "a/$f" --label "b/$f" "$SRC/$f" "$KTREE/$f" >>"$tmp" || true
	done
	if cmp -s "$tmp" "$p"; then
		rm -f "$tmp"
	else
		mv "$tmp" "$p"
		log "refreshed $(basename "$p")"
	fi
done
