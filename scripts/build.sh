#!/usr/bin/env bash
# Build the kernel (bzImage) and the ib_ipoib module, incrementally.
# Usage: scripts/build.sh [make targets...]   (default: bzImage modules, then install them)
# IPOIB_RS_FLAVOUR=debug builds the debug kernel (KASAN, kmemleak, lockdep) in its own tree,
# IPOIB_RS_FLAVOUR=bench the benchmark kernel (no lock debugging) in another.
# IPOIB_RS_LINE_TABLES=1 builds the Rust modules with line tables (stripped when installed,
# kept in the build tree's ib_ipoib.ko), for `cost-annotate.py --lines`; their code then
# differs a little from a normal build's, and switching rebuilds them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

"$REPO/scripts/prepare-tree.sh"

MAKE=(make -C "$KTREE" O="$KBUILD" LLVM=1 CLIPPY=1 -j"$(($(nproc) + 1))" -s)
[ "${IPOIB_RS_LINE_TABLES:-0}" = 0 ] || MAKE+=(RUSTFLAGS_MODULE=-Cdebuginfo=line-tables-only)
fragments=("$REPO/config/ipoib-rs.config")
case "$FLAVOUR" in
default) ;;
debug | bench) fragments+=("$REPO/config/$FLAVOUR.config") ;;
*) die "unknown flavour $FLAVOUR" ;;
esac

# Configure when the fragments (or the tree) changed since the last configuration.
mkdir -p "$KBUILD"
want=$(cat "${fragments[@]}" "$KTREE/.ipoib-rs-stamp" | sha256sum | cut -d' ' -f1)
if [ ! -f "$KBUILD/.config" ] || [ "$(cat "$KBUILD/.ipoib-rs-config" 2>/dev/null)" != "$want" ]; then
	log "configuring the $FLAVOUR kernel in $KBUILD"
	"${MAKE[@]}" tinyconfig >/dev/null
	(cd "$KBUILD" && "$KTREE/scripts/kconfig/merge_config.sh" -m -O "$KBUILD" \
		"$KBUILD/.config" "${fragments[@]}" >/dev/null)
	"${MAKE[@]}" olddefconfig >/dev/null
	# Every option the fragments ask for must have survived olddefconfig; where several
	# fragments set one, the last one's word counts (as in merge_config.sh).
	bad=0
	declare -A asked=()
	for f in "${fragments[@]}"; do
		while IFS= read -r line; do
			case "$line" in
			CONFIG_*=*) asked[${line%%=*}]=$line ;;
			"# CONFIG_"*" is not set") sym=${line#\# }; asked[${sym%% *}]=$line ;;
			esac
		done <"$f"
	done
	for sym in "${!asked[@]}"; do
		line=${asked[$sym]}
		case "$line" in
		CONFIG_*=*)
			grep -qx "$line" "$KBUILD/.config" || { log "config: $line did not stick"; bad=1; } ;;
		*)
			! grep -q "^$sym=" "$KBUILD/.config" || { log "config: $sym should be off"; bad=1; } ;;
		esac
	done
	[ "$bad" = 0 ] || die "kernel configuration incomplete (see above)"
	echo "$want" >"$KBUILD/.ipoib-rs-config"
fi

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(bzImage modules)
log "make ${targets[*]} ($FLAVOUR; a clean build takes about 15 minutes)"
start=$(date +%s)
# A line a minute while make runs: the objects it made so far, against how many the last
# complete build of this tree had (about 1500 for the first one: measured on these configs).
stamp=$KBUILD/.ipoib-rs-build-start
touch "$stamp"
total=$(cat "$KBUILD/.ipoib-rs-objects" 2>/dev/null || echo 1500)
(
	# Stopped with make: its sleep too, which must not keep our output open.
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM
	while :; do
		sleep 60 </dev/null >/dev/null 2>&1 &
		nap=$!
		wait "$nap"
		log "make: $(find "$KBUILD" -name '*.o' -newer "$stamp" | wc -l) objects built in" \
			"$((($(date +%s) - start) / 60)) min (a whole build makes about $total)"
	done
) &
progress=$!
# kallsyms complains about the long mangled names of the kernel crate's doctests (harmless:
# those symbols are only left out of the symbol table); everything else is shown.
rc=0
"${MAKE[@]}" "${targets[@]}" 2> >(grep -v -e 'too long for kallsyms' -e 'increase KSYM_NAME_LEN' >&2) || rc=$?
kill "$progress" 2>/dev/null
wait "$progress" 2>/dev/null || true
[ "$rc" = 0 ] || die "make ${targets[*]} failed (exit $rc)"
find "$KBUILD" -name '*.o' | wc -l >"$KBUILD/.ipoib-rs-objects"
log "built in $(($(date +%s) - start)) s"

if [ $# -eq 0 ]; then
	dest=$OUT/$FLAVOUR
	rm -rf "$dest/modroot.tmp"
	mkdir -p "$dest"
	"${MAKE[@]}" modules_install INSTALL_MOD_PATH="$dest/modroot.tmp" INSTALL_MOD_STRIP=1 >/dev/null
	rm -rf "$dest/modroot"
	mv "$dest/modroot.tmp" "$dest/modroot"
	cp "$KBUILD/arch/x86/boot/bzImage" "$dest/bzImage"

	# The upstream C ipoib, the control on the InfiniBand fabric (rxe_ib): built from the
	# pristine sources as an external module, with connected mode and its debugfs files.
	# It has our module's name, so the guests load it by path (/opt/ipoib-c), never both.
	# It carries the fixes in kernel/c-ipoib/ alone: leaks the debug kernel's kmemleak
	# reports, which nothing the tests compare depends on.
	c_ipoib_sources() {
		rsync -a --delete "$SRC/drivers/infiniband/ulp/ipoib/" "$1/"
		local p
		for p in "$REPO"/kernel/c-ipoib/*.patch; do
			patch -s -p5 -d "$1" --no-backup-if-mismatch <"$p" ||
				die "$(basename "$p") does not apply to the C ipoib of $KERNEL_VERSION"
		done
	}
	cipoib=$CACHE/ipoib-c-$FLAVOUR
	mkdir -p "$cipoib"
	c_ipoib_sources "$cipoib"
	"${MAKE[@]}" M="$cipoib" CONFIG_INFINIBAND_IPOIB=m CONFIG_INFINIBAND_IPOIB_CM=y \
		CONFIG_INFINIBAND_IPOIB_DEBUG=y \
		KCFLAGS="-DCONFIG_INFINIBAND_IPOIB_CM=1 -DCONFIG_INFINIBAND_IPOIB_DEBUG=1" modules
	cp "$cipoib/ib_ipoib.ko" "$dest/ipoib-c.ko"
	# And without connected mode: a datagram-only peer (its addresses lack the RC flag).
	cipoib_ud=$CACHE/ipoib-c-ud-$FLAVOUR
	mkdir -p "$cipoib_ud"
	c_ipoib_sources "$cipoib_ud"
	"${MAKE[@]}" M="$cipoib_ud" CONFIG_INFINIBAND_IPOIB=m CONFIG_INFINIBAND_IPOIB_DEBUG=y \
		KCFLAGS="-DCONFIG_INFINIBAND_IPOIB_DEBUG=1" modules
	cp "$cipoib_ud/ib_ipoib.ko" "$dest/ipoib-c-ud.ko"
fi
