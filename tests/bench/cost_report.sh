#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Host test of the cost benchmark's two host-side parts: the QEMU plugin builds
# (bench/cost-plugin), and scripts/cost-report.py places made-up counts where they belong
# and divides them as it should. The counts sit at real addresses of the kernel and the
# modules the suite built (a function of each driver's .ko at the address a made-up guest
# gave its .text, an rxe function, a kernel crate function and a core kernel function of
# vmlinux), so that the figures are known exactly. Prints one "ok - ..." or "not ok - ..." line per check.
# Usage: cost_report.sh KBUILD RUST-KO C-KO PLUGIN-TARGET-DIR
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$1 rust_ko=$2 c_ko=$3 target=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

check() { # check NAME COMMAND...
	local name=$1
	shift
	if "$@"; then echo "ok - cost: $name"; else echo "not ok - cost: $name"; fi
}

plugin_builds() {
	cargo build --release --locked --quiet --manifest-path "$repo/bench/cost-plugin/Cargo.toml" \
		--target-dir "$target" &&
		nm -D "$target/release/libipoib_cost.so" | grep -q " T qemu_plugin_install" &&
		nm -D "$target/release/libipoib_cost.so" | grep -q " R qemu_plugin_version"
}
check "the QEMU plugin builds and exports qemu_plugin_install and qemu_plugin_version" plugin_builds

# first_function KO: the offset of the first function of the .ko's .text.
first_function() {
	local text
	text=$(readelf -SW "$1" | sed -n 's/.*\[ *\([0-9]*\)\] \.text .*/\1/p')
	readelf -sW "$1" | awk -v s="$text" '$4 == "FUNC" && $7 == s { print $2; exit }'
}
kaddr() { nm "$build/vmlinux" | awk -v n="$1" '$3 == n { print $1; exit }'; }
rust_off=$(first_function "$rust_ko") c_off=$(first_function "$c_ko")
rxe=$(kaddr rxe_requester) core=$(kaddr schedule) stext=$(kaddr _stext)
# A function of the kernel crate, compiled into the kernel image: the driver's part.
crate=$(nm "$build/vmlinux" | awk '$2 ~ /^[tT]$/ && $3 ~ /^_RNv.*6kernel/ { print $1; exit }')
if [ -z "$rust_off" ] || [ -z "$c_off" ] || [ -z "$rxe" ] || [ -z "$core" ] || [ -z "$crate" ]; then
	echo "not ok - cost: symbols of the built kernel and modules found (rust $rust_off c $c_off rxe $rxe schedule $core crate $crate)"
	exit 1
fi
hex() { printf '%x' "$1"; }
rust_base=$((0xffffffffc0000000)) c_base=$((0xffffffffc1000000))

# The server (host0): window 0 ours, 10 packets received: 1000 instructions in the module
# (two vCPUs), 100 in the kernel crate's Rust, 300 in rxe, 200 elsewhere in the kernel, 100
# in user space: per packet 100, 10 (the driver 110), 30, 20, 170 in all. Window 1 C's: 500 in its module, nothing else: 50 per packet.
# Window 2 ours again, counted by the plugin but its COST line failed; window 3 has a
# COST line the plugin never counted. The client (host1) counted window 2 only, which
# failed on the server and so counts on neither.
cat >"$work/host0.cost" <<EOF
window 0 vcpus 2
$(hex $((rust_base + 0x$rust_off))) 600 400
$crate 60 40
$rxe 300 0
$core 0 200
user 50 50
end 0
window 1 vcpus 2
$(hex $((c_base + 0x$c_off))) 0 500
user 0 0
end 1
window 2 vcpus 2
$core 7 7
user 0 0
end 2
EOF
cat >"$work/host0.results" <<EOF
# COSTKERNEL _stext 0x$stext
# COST 0 rust datagram udp 1 server 10 0 0 0 10
# COSTSEC 0 ib_ipoib .text 0x$(hex $rust_base)
# COST 1 c datagram udp 1 server 10 0 0 0 10
# COSTSEC 1 ib_ipoib .text 0x$(hex $c_base)
# COST 2 rust datagram udp 2 server failed netperf exited 1
# COST 3 rust datagram udp 3 server 10 0 0 0 10
# COSTSEC 3 ib_ipoib .text 0x$(hex $rust_base)
EOF
cat >"$work/host1.cost" <<EOF
window 2 vcpus 2
$(hex $((rust_base + 0x$rust_off))) 600 400
user 0 0
end 2
EOF
cat >"$work/host1.results" <<EOF
# COST 2 rust datagram udp 2 client 10 0 0 10 0
# COSTSEC 2 ib_ipoib .text 0x$(hex $rust_base)
EOF

python3 "$repo/scripts/cost-report.py" --logs "$work" --build "$build" --rust-ko "$rust_ko" \
	--c-ko "$c_ko" --json "$work/cost.json" --markdown "$work/cost.md" \
	--symbols "$work/symbols.txt" --commit test --flavour test >"$work/out" 2>&1
rc=$?
figure() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$work/cost.json" "$1"; }
figures_are() {
	local k v want bad=0
	for kv in "$@"; do
		k=${kv%=*} want=${kv#*=}
		v=$(figure "$k")
		[ "$v" = "$want" ] || { echo "#   $k: $v, not $want"; bad=1; }
	done
	return $bad
}
check "instructions per packet placed in the module, the kernel crate's Rust, rxe, the kernel and all, per driver" \
	figures_are cost_rust_datagram_udp_server_module=100.0 cost_rust_datagram_udp_server_crate=10.0 \
	cost_rust_datagram_udp_server_driver=110.0 cost_rust_datagram_udp_server_rxe=30.0 \
	cost_rust_datagram_udp_server_kernel=20.0 cost_rust_datagram_udp_server_all=170.0 \
	cost_c_datagram_udp_server_module=50.0 cost_c_datagram_udp_server_driver=50.0 \
	cost_c_datagram_udp_server_all=50.0
check "Rust/C ratios of the module, the driver and all" \
	figures_are cost_rust_to_c_datagram_udp_server_module=2.0 cost_rust_to_c_datagram_udp_server_driver=2.2 \
	cost_rust_to_c_datagram_udp_server_all=3.4
check "the failed measurement, its other host's and the one the plugin never counted are counted, and fail the run" \
	eval '[ "$(figure failures)" = 3 ] && [ "$rc" = 1 ] && grep -q "window 3 .* not counted" "$work/out" &&
		[ "$(figure cost_rust_datagram_udp_client_module)" = None ]'
check "the table and the functions that cost most are written" \
	eval 'grep -q "| datagram | udp | server | packet | 50 | 110 | 2.20 | 2.00 | 50 | 170 | 3.40 |" "$work/cost.md" &&
		grep -q "^  *100  " "$work/symbols.txt" && grep -q "^  *20  schedule" "$work/symbols.txt" &&
		grep -A1 "server crate:" "$work/symbols.txt" | grep -q "^  *10  "'
grep -q "^not ok" <(cat "$work/out" /dev/null) && cat "$work/out"
exit 0
