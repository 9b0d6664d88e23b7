#!/usr/bin/env bash
# Export the kernel overlay, the driver and its tests as a `git format-patch` series against
# pristine Linux, split as upstream would review it: one commit per kernel/patches/*.patch,
# each with that patch's edits of existing files and the new files of its part:
#   0001-0008 the core crate: error codes, jiffies, SpinLockBh, an RCU guard, delayed work
#             and flushing, msleep, debugfs, module parameters (each with its C helpers)
#   0009 net abstractions (with their bindings and helpers)   0010 RDMA abstractions (ditto)
#   0011 the driver               0012 the selftests
#   0013 rxe: interrupt-safe pools (fix)   0014 rxe: the last WQE reached event (fix)
#   0015 rxe_ib, an InfiniBand link layer for soft-RoCE (test infrastructure only)
#   0016 rxe: fault injection of RNR NAKs (testing)
# The commit messages are the patches' headers; the author and sign-off are those of the
# repository's last commit unless IPOIB_RS_AUTHOR="Name <email>" says otherwise.
# Usage: scripts/export-patches.sh [OUTDIR]   (default: $IPOIB_RS_CACHE/out/patches)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=${1:-$OUT/patches}
"$REPO/scripts/prepare-tree.sh"
manifest=$KTREE/.ipoib-rs-manifest

# The part of the series that adds FILE (a path in the kernel tree).
part_of() {
	case $1 in
	rust/helpers/spinlock_bh.c | rust/kernel/sync/lock/spinlock_bh.rs) echo 0003 ;;
	rust/helpers/rcu.c | rust/kernel/sync/rcu.rs) echo 0004 ;;
	rust/helpers/delayed_work.c) echo 0005 ;;
	rust/kernel/delay.rs) echo 0006 ;;
	rust/kernel/debugfs.rs) echo 0007 ;;
	rust/kernel/module_param.rs) echo 0008 ;;
	rust/helpers/net.c | rust/kernel/net/*) echo 0009 ;;
	rust/helpers/rdma.c | rust/kernel/rdma.rs | rust/kernel/rdma/*) echo 0010 ;;
	drivers/infiniband/ulp/ipoib_rs/* | Documentation/infiniband/ipoib_rs.rst) echo 0011 ;;
	tools/testing/selftests/drivers/net/ipoib/*) echo 0012 ;;
	drivers/infiniband/sw/rxe/*) echo 0015 ;;
	*) echo none ;;
	esac
}

author=${IPOIB_RS_AUTHOR:-$(git -C "$REPO" log -1 --format='%an <%ae>')}
date=$(git -C "$REPO" log -1 --format=%aD)
work=$(mktemp -d)
trap 'rm -rf "$work" "$work.letter"' EXIT
git -C "$work" init -q
g() {
	GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date \
		git -C "$work" -c user.name="${author% <*}" -c user.email="$(sed 's/.*<\(.*\)>.*/\1/' <<<"$author")" \
		-c commit.gpgsign=false "$@"
}

# The base: the pristine versions of the files the series edits.
while read -r f; do
	if [ -f "$SRC/$f" ]; then
		mkdir -p "$work/$(dirname "$f")"
		cp "$SRC/$f" "$work/$f"
	elif [ "$(part_of "$f")" = none ]; then
		die "no part of the series adds $f: extend part_of in $0"
	fi
done <"$manifest"
g add -A
g commit -qm "Linux $KERNEL_VERSION: the files the series edits"
base=$(g rev-parse HEAD)

for p in "$REPO"/kernel/patches/*.patch; do
	n=$(basename "$p" | cut -c1-4)
	if grep -q '^+++ ' "$p"; then
		patch -s -p1 -d "$work" --no-backup-if-mismatch <"$p" || die "$(basename "$p") does not apply"
	fi
	while read -r f; do
		if [ ! -f "$SRC/$f" ] && [ "$(part_of "$f")" = "$n" ]; then
			mkdir -p "$work/$(dirname "$f")"
			cp "$KTREE/$f" "$work/$f"
		fi
	done <"$manifest"
	subject=$(sed -n 's/^Subject: //p;/^---$/q' "$p" | head -n 1)
	[ -n "$subject" ] || die "$(basename "$p") has no Subject: line"
	# The body: the lines between the subject and the first '---'.
	body=$(sed -n '2,/^---$/p' "$p" | sed '$d')
	# The driver's figures against C come from the results' JSON, not from the header.
	if grep -qx '@FIGURES@' <<<"$body"; then
		figures=$(python3 "$REPO/scripts/cover-letter.py" --figures)
		body=$(awk -v f="$figures" '$0 == "@FIGURES@" { print f; next } { print }' <<<"$body")
	fi
	g add -A
	g commit -q -F - <<MSG
$subject
$body

Signed-off-by: $author
MSG
done

rm -rf "$out"
mkdir -p "$out"
g format-patch -q --cover-letter -o "$out" "$base"..HEAD
# The cover letter: what the driver is, why, how it was tested, how it compares with C.
cover=$(ls "$out"/0000-*.patch)
python3 "$REPO/scripts/cover-letter.py" "$out" "$work" >"$work.letter"
python3 - "$cover" "$work.letter" <<'PY'
import sys
path = sys.argv[1]
subject, _, blurb = open(sys.argv[2], encoding="utf-8").read().partition("\n")
text = open(path, encoding="utf-8").read()
text = text.replace("*** SUBJECT HERE ***", subject).replace("*** BLURB HERE ***", blurb.strip())
open(path, "w", encoding="utf-8").write(text)
PY
log "series of $(($(ls "$out" | wc -l) - 1)) patches and a cover letter against Linux $KERNEL_VERSION in $out"
