#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The Rust net_device abstractions, through the test device of net_rs_selftest.ko:
# registration, set-up values, open/stop, transmit with skb push/pull, counters, MTU checks
# (a driver may run at less than the MTU asked for), unregistration while up.
. "$(dirname "$0")/lib.sh"

SELFTEST=net_rs_selftest
DEV=rsnettest0

ktap_print_header
if ! modinfo "$SELFTEST" >/dev/null 2>&1; then
	ktap_skip_all "module $SELFTEST not built (CONFIG_INFINIBAND_IPOIB_RUST_SELFTEST)"
	exit "$KSFT_SKIP"
fi
ktap_set_plan 10
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $SELFTEST registers $DEV" \
	eval 'modprobe "$SELFTEST" && [ -d /sys/class/net/$DEV ]'
attrs() {
	[ "$(cat /sys/class/net/$DEV/type)" = 65534 ] &&
		[ "$(cat /sys/class/net/$DEV/mtu)" = 1500 ] &&
		ip -d link show "$DEV" | grep -q "minmtu 68 maxmtu 9000" &&
		ip link show "$DEV" | grep -q "POINTOPOINT,NOARP"
}
ipoib_check "set-up values visible (type, MTU range, flags)" attrs
klog_mark
ipoib_check "link up calls open" eval 'ip link set "$DEV" up && klog_since | grep -q "$DEV: open"'

transmit() {
	ip addr add 198.51.100.1 peer 198.51.100.2/32 dev "$DEV" || return 1
	local before after rx_before rx_after s=/sys/class/net/$DEV/statistics
	local txb_before txb_after rxb_before rxb_after
	before=$(cat $s/tx_packets) rx_before=$(cat $s/rx_packets)
	txb_before=$(cat $s/tx_bytes) rxb_before=$(cat $s/rx_bytes)
	ping -c 5 -i 0.2 -W 1 -s 100 198.51.100.2 >/dev/null 2>&1
	after=$(cat $s/tx_packets) rx_after=$(cat $s/rx_packets)
	txb_after=$(cat $s/tx_bytes) rxb_after=$(cat $s/rx_bytes)
	echo "tx_packets $before -> $after, rx_packets $rx_before -> $rx_after," \
		"tx_bytes $txb_before -> $txb_after, rx_bytes $rxb_before -> $rxb_after"
	# Each copy is as long as the packet sent (IPv4, 20 + 8 + 100 bytes).
	[ $((after - before)) -eq 5 ] && [ $((rx_after - rx_before)) -eq 5 ] &&
		[ $((txb_after - txb_before)) -eq 640 ] &&
		[ $((rxb_after - rxb_before)) -eq 640 ] &&
		[ "$(cat $s/tx_dropped)" = 0 ]
}
desc="5 pings built by header_ops, transmitted,"
desc+=" looped back through NAPI (copied into skbs of Napi::alloc_skb), counted"
ipoib_check "$desc" transmit
ipoib_check "MTU 8800 accepted, run at 8000 as the driver says" \
	eval 'ip link set "$DEV" mtu 8800 && [ "$(cat /sys/class/net/$DEV/mtu)" = 8000 ]'
ipoib_check "MTU 4000 accepted" \
	eval 'ip link set "$DEV" mtu 4000 && [ "$(cat /sys/class/net/$DEV/mtu)" = 4000 ]'
mtu_refused() {
	! ip link set "$DEV" mtu 4001 2>/dev/null && ! ip link set "$DEV" mtu 9002 2>/dev/null &&
		! ip link set "$DEV" mtu 60 2>/dev/null &&
		[ "$(cat /sys/class/net/$DEV/mtu)" = 4000 ]
}
ipoib_check "odd, too large and too small MTUs refused" mtu_refused
klog_mark
# shellcheck disable=SC2016 # expanded by eval
ipoib_check "rmmod while up: stop called, device gone" \
	eval 'rmmod "$SELFTEST" && klog_since | grep -q "$DEV: stop" &&' \
		'! [ -e /sys/class/net/$DEV ]'
# The poll function's state (`napi::Poll`) is the context's, made once: it counted every round.
poll_state() {
	local line polls counted
	line=$(klog_since | grep -o "$DEV: stop after [0-9]* NAPI rounds, [0-9]* counted" | tail -1)
	echo "${line:-no stop line}"
	polls=$(echo "$line" | awk '{print $4}') counted=$(echo "$line" | awk '{print $7}')
	[ -n "$polls" ] && [ "$polls" -ge 5 ] && [ "$polls" = "$counted" ]
}
ipoib_check "NAPI poll state kept from round to round (every round counted in it)" poll_state
KLOG_MARK=$start_mark
ipoib_check "kernel log clean" klog_clean_since
ktap_finished
