#!/usr/bin/env bash
# Rewrite kernel/patches/*.patch from the kernel tree: after editing a file that a patch
# touches directly in the tree ($IPOIB_RS_CACHE/linux-src), this captures the edit. Each
# patch keeps its header (the commit message of the exported series) and the set of files
# it already touches; the diff is taken against the pristine sources. A file that several
# patches edit (rust/kernel/lib.rs, drivers/infiniband/Kconfig) cannot be split this way:
# those edits are reported and left to be made in the patches by hand. Review the result
# with `git diff kernel/patches`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -d "$KTREE" ] && [ -d "$SRC" ] || die "no kernel tree: run scripts/build.sh first"
files_of() { sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$1" | sort -u; }
shared=$(for p in "$REPO"/kernel/patches/*.patch; do files_of "$p"; done | sort | uniq -d)
for p in "$REPO"/kernel/patches/*.patch; do
	grep -q '^+++ ' "$p" || continue
	tmp=$(mktemp)
	sed '/^--- a\//,$d' "$p" >"$tmp"
	for f in $(files_of "$p"); do
		if grep -qx "$f" <<<"$shared"; then
			# Keep this patch's own hunks of a shared file.
			awk -v f="$f" '/^--- a\//{keep = ($2 == "a/" f)} keep' "$p" >>"$tmp"
			continue
		fi
		diff -u -p --label "a/$f" --label "b/$f" "$SRC/$f" "$KTREE/$f" >>"$tmp" || true
	done
	if cmp -s "$tmp" "$p"; then
		rm -f "$tmp"
	else
		mv "$tmp" "$p"
		log "refreshed $(basename "$p")"
	fi
done
for f in $shared; do
	log "$f is edited by several patches: edit them by hand if it changed"
done
