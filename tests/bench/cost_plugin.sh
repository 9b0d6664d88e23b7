#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# End-to-end test of the cost benchmark's QEMU plugin (bench/cost-plugin) with this
# machine's QEMU: one guest boots with the plugin loaded and runs one_host_plugin_cost.sh,
# whose marks open and close three windows; the plugin's counts must match what ran:
# 2000000 and 6000000 user-space instructions in windows 1 and 2 (a loop of two
# instructions; the marks' own calls and returns add a handful, any other process a few),
# kernel code in window 3 (a dd from /dev/zero), both vCPUs reported. Prints one "ok - ..." or "not ok - ..." line
# per check. Usage: cost_plugin.sh PLUGIN-TARGET-DIR
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/scripts/lib.sh"
target=$1
run=$(date +%Y%m%d-%H%M%S)-cost-plugin
cargo build --release --locked --quiet --manifest-path "$repo/bench/cost-plugin/Cargo.toml" \
	--target-dir "$target" || { echo "not ok - cost plugin: builds"; exit 1; }
IPOIB_RS_QEMU_PLUGIN=$target/release/libipoib_cost.so IPOIB_RS_RUN=$run \
	"$repo/scripts/vm.sh" one-host one_host_plugin_cost.sh | sed 's/^\(not \)\{0,1\}ok - /&cost plugin: /'
cost=$OUT/logs/$run/host0.cost
# window_sum W user|kernel: the instructions of window W in user space or the kernel (all
# vCPUs), with the vCPU count of the window.
window_sum() {
	awk -v w="$1" -v part="$2" '
		$1 == "window" { on = ($2 == w); vcpus = $4; next }
		$1 == "end" { on = 0; next }
		on && (($1 == "user") == (part == "user")) { for (i = 2; i <= NF; i++) n += $i }
		END { printf "%d %d\n", n, vcpus }' "$cost" 2>/dev/null
}
within() { # within NAME W PART LOW HIGH
	local n v
	read -r n v < <(window_sum "$2" "$3")
	if [ "${v:-0}" = 2 ] && [ "$n" -ge "$4" ] && [ "$n" -le "$5" ]; then
		echo "ok - cost plugin: $1 ($n, 2 vCPUs)"
	else
		echo "not ok - cost plugin: $1 (counted ${n:-nothing} over ${v:-no} vCPUs, not $4..$5 over 2)"
	fi
}
within "window 1: 2000000 user-space instructions counted" 1 user 2000000 2005000
within "window 2: 6000000 user-space instructions counted" 2 user 6000000 6005000
within "window 3: the kernel's part counted (1000 reads and writes, over 500 instructions each)" 3 kernel 1000000 400000000
