#!/usr/bin/env bash
# Lay out the kernel source tree for building: Debian's linux-source-6.12, the kernel/
# overlay of this repository and the driver as drivers/infiniband/ulp/ipoib_rs.
# Files are written only when their content changed, so make rebuilds only what we touched.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

tarball=/usr/src/linux-source-$KERNEL_VERSION.tar.xz
[ -f "$tarball" ] || die "$tarball missing: run scripts/setup.sh"

# 1. Pristine sources, unpacked once per tarball.
stamp=$(stat -c '%s-%Y' "$tarball")
if [ "$(cat "$SRC/.ipoib-rs-stamp" 2>/dev/null)" != "$stamp" ]; then
	log "unpacking $tarball into $SRC (about a minute)"
	rm -rf "$SRC" "$SRC.tmp" "$KTREE"
	mkdir -p "$SRC.tmp"
	tar -xJf "$tarball" -C "$SRC.tmp" --strip-components=1
	echo "$stamp" >"$SRC.tmp/.ipoib-rs-stamp"
	mv "$SRC.tmp" "$SRC"
fi

# 2. The working tree: a copy of the pristine one that we overlay.
if [ ! -f "$KTREE/.ipoib-rs-stamp" ]; then
	log "copying the pristine tree to $KTREE"
	rm -rf "$KTREE.tmp"
	cp -a "$SRC" "$KTREE.tmp"
	mv "$KTREE.tmp" "$KTREE"
	: >"$KTREE/.ipoib-rs-manifest"
fi

# install_if_changed SRC DST: copy when the content differs, keeping DST's mtime otherwise.
install_if_changed() {
	if ! cmp -s "$1" "$2"; then
		mkdir -p "$(dirname "$2")"
		cp "$1" "$2.ipoib-rs-tmp"
		mv "$2.ipoib-rs-tmp" "$2"
		log "updated ${2#"$KTREE"/}"
	fi
}

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

# 3. Gather the desired content of every file we own into $staging, tree-relative.
#    a) whole files of the overlay (kernel/ minus its patches, and minus the fixes of the
#       C ipoib built as the tests' control, which scripts/build.sh applies to its copy)
(cd "$REPO/kernel" && find . -type f ! -path './patches/*' ! -path './c-ipoib/*' -print0) |
	while IFS= read -r -d '' f; do
		mkdir -p "$staging/$(dirname "$f")"
		cp "$REPO/kernel/$f" "$staging/$f"
	done
#    b) the driver
drv=drivers/infiniband/ulp/ipoib_rs
mkdir -p "$staging/$drv"
cp "$REPO"/Kconfig "$REPO"/Makefile "$REPO"/*.rs "$staging/$drv/"
#    c) the test module of the RDMA abstractions, built from the driver's folder
mkdir -p "$staging/$drv/selftest"
cp "$REPO"/tests/kmod/* "$staging/$drv/selftest/"
#    d) the driver's documentation
mkdir -p "$staging/Documentation/infiniband"
cp "$REPO/docs/ipoib_rs.rst" "$staging/Documentation/infiniband/"
#    e) the selftests, where the patch series puts them
mkdir -p "$staging/tools/testing/selftests/drivers/net"
cp -r "$REPO/tests/selftests/drivers/net/ipoib" "$staging/tools/testing/selftests/drivers/net/"
#    f) edits of existing kernel files: the patches applied to pristine copies, in order
#       (one patch per commit of the series that scripts/export-patches.sh writes)
shopt -s nullglob
patches=("$REPO"/kernel/patches/*.patch)
for p in "${patches[@]}"; do
	sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$p"
done | sort -u | while read -r f; do
	mkdir -p "$staging/$(dirname "$f")"
	[ -f "$SRC/$f" ] && cp "$SRC/$f" "$staging/$f"
	true
done
for p in "${patches[@]}"; do
	grep -q '^+++ ' "$p" || continue # a patch of the series that only adds files
	patch -s -p1 -d "$staging" --no-backup-if-mismatch <"$p" ||
		die "patch $(basename "$p") does not apply to $KERNEL_VERSION"
done

# 4. Install changed files; restore files we no longer own from the pristine tree.
(cd "$staging" && find . -type f | sed 's|^\./||' | sort) >"$staging.manifest"
while read -r f; do
	install_if_changed "$staging/$f" "$KTREE/$f"
done <"$staging.manifest"
comm -23 <(sort "$KTREE/.ipoib-rs-manifest") "$staging.manifest" | while read -r f; do
	if [ -f "$SRC/$f" ]; then install_if_changed "$SRC/$f" "$KTREE/$f"; else rm -f "$KTREE/$f"; fi
	log "released $f"
done
mv "$staging.manifest" "$KTREE/.ipoib-rs-manifest"
