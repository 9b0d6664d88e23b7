#!/usr/bin/env bash
# Build the guest's initramfs from host binaries: busybox, iproute2, rdma-core and perftest
# tools, netperf, iperf3, perf, bash, opensm and infiniband-diags, the rxe verbs provider, the built kernel modules, the
# kselftest tree of the driver and the guest init. Output: $OUT/$FLAVOUR/initramfs.cpio
set -euo pipefail
. "$(dirname "$0")/lib.sh"

dest=$OUT/$FLAVOUR
[ -d "$dest/modroot/lib/modules" ] || die "no installed modules in $dest: run scripts/build.sh"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

BINARIES=(
	/usr/sbin/ip /usr/sbin/ethtool /usr/bin/rdma /usr/bin/bash
	/usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong
	/usr/bin/ib_send_bw /usr/bin/ib_send_lat /usr/bin/ib_write_bw
	/usr/bin/netperf /usr/bin/netserver /usr/bin/iperf3
	/usr/bin/timeout /usr/bin/perf
	/usr/sbin/opensm /usr/sbin/smpquery /usr/sbin/sminfo /usr/sbin/ibnetdiscover
	/usr/sbin/saquery /usr/sbin/ibstat /usr/sbin/ibaddr /usr/bin/rping /usr/bin/mckey
)

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,run,root,var/tmp}
cp /bin/busybox "$root/bin/busybox"

# copy_with_libs FILE: FILE at the same path plus every shared library it loads.
copy_with_libs() {
	local f=$1
	[ -e "$f" ] || die "$f missing: run scripts/setup.sh"
	mkdir -p "$root$(dirname "$f")"
	cp -L "$f" "$root$f"
	copy_libs_of "$f"
}

# copy_libs_of FILE: every shared library FILE loads, at the same path.
copy_libs_of() {
	local lib
	for lib in $(ldd "$1" 2>/dev/null | grep -oE '/[^ ]+' | sort -u); do
		if [ ! -e "$root$lib" ]; then
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		fi
	done
}
for b in "${BINARIES[@]}"; do copy_with_libs "$b"; done

# libibverbs loads its providers by name at run time: the rxe one and its config.
multiarch=/usr/lib/x86_64-linux-gnu
for p in "$multiarch"/libibverbs/librxe-rdmav*.so; do copy_with_libs "$p"; done
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
# iproute2 reads a few tables from /etc or /usr/share.
for d in /etc/iproute2 /usr/share/iproute2; do
	[ -d "$d" ] && mkdir -p "$root$d" && cp -r "$d/." "$root$d/"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
printf 'netperf 12865/tcp\n' >"$root/etc/services"

# Kernel modules, with the depmod data modules_install wrote; the C ipoib apart from them.
cp -a "$dest/modroot/lib/modules" "$root/lib/"
mkdir -p "$root/opt/ipoib-c" "$root/var/cache/opensm" "$root/var/log"
cp "$dest/ipoib-c.ko" "$root/opt/ipoib-c/ib_ipoib.ko"
cp "$dest/ipoib-c-ud.ko" "$root/opt/ipoib-c/ib_ipoib_ud.ko"

# The kselftests, installed by the kernel's kselftest build from the tree the patch series
# lays out (tools/testing/selftests/drivers/net/ipoib), with the kselftest runner.
make -s -C "$KTREE/tools/testing/selftests" TARGETS=drivers/net/ipoib \
	INSTALL_PATH="$root/selftests" install >/dev/null
for f in "$root"/selftests/drivers/net/ipoib/*; do
	if [ -x "$f" ]; then copy_libs_of "$f"; fi
done
cp "$REPO/scripts/guest/init" "$root/init"
chmod +x "$root/init"

(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet -R 0:0) >"$dest/initramfs.cpio.tmp"
mv "$dest/initramfs.cpio.tmp" "$dest/initramfs.cpio"
log "initramfs: $dest/initramfs.cpio ($(du -h "$dest/initramfs.cpio" | cut -f1))"
