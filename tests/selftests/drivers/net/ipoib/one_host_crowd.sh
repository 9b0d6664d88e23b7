#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# 256 connected-mode peers at once, then all gone. rdma_rs_selftest.ko, loaded with
# ipoib_qpn=QPN ipoib_peers=256, opens 256 connections from rxe0 to the IPoIB service of the
# interface of rxe1, sends one message on each and keeps them until it is unloaded. The
# interface accepts them all, on its one shared receive queue: the memory they take is
# printed per connection and must stay below one receive buffer each (no per-connection
# receive ring). Unloaded, the peers close their connections: the interface destroys them
# all and the memory returns to where it was (kmemleak checks the rest on the debug kernel).
. "$(dirname "$0")/lib.sh"

SELFTEST=rdma_rs_selftest
PEERS=${IPOIB_RS_CROWD:-256}

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1 || ! modinfo "$SELFTEST" >/dev/null 2>&1; then
	ktap_skip_all "$MODULE or $SELFTEST not built"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
ktap_set_plan 7
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
stat() { ethtool_stat "$ib_b" "$1"; }
up() {
	[ -n "$ib_b" ] && ip addr add 198.51.100.2/24 dev "$ib_b" && ip link set "$ib_b" up
}
ipoib_check "$ib_b (rxe1, connected mode) up" up
qpn=0x$(cut -d: -f2-4 "/sys/class/net/$ib_b/address" | tr -d :)
base=$(kernel_kib) base_dropped=$(stat rx_dropped)

klog_mark
modprobe "$SELFTEST" ipoib_qpn="$qpn" ipoib_peers="$PEERS" ||
	ktap_print_msg "modprobe $SELFTEST ipoib_qpn=$qpn ipoib_peers=$PEERS failed"
ktap_relay "$(klog_since | sed -n "s/^.*$SELFTEST: //p")"

crowd() {
	local n during
	wait_for 20 eval '[ "$(stat cm_rx_connections)" = "$PEERS" ]'
	n=$(stat cm_rx_connections)
	during=$(kernel_kib)
	echo "$n receive connections, $(($(stat rx_dropped) - base_dropped)) messages dropped as unknown ethertype"
	echo "slab and vmalloc: $base -> $during KiB, $(((during - base) * 1024 / PEERS)) bytes per connection" \
		"(both ends: the peers' queue pairs are on this host too)"
	[ "$n" = "$PEERS" ] && [ "$(($(stat rx_dropped) - base_dropped))" = "$PEERS" ] &&
		[ $(((during - base) * 1024 / PEERS)) -lt 65536 ]
}
ipoib_check "$PEERS peers connected at once, each message counted, under one receive buffer of memory each" crowd

gone() {
	local after
	rmmod "$SELFTEST" || return 1
	wait_for 30 eval '[ "$(stat cm_rx_connections)" = 0 ] && [ "$(rc_qp_count)" = 0 ]' || {
		echo "still $(stat cm_rx_connections) connections, $(rc_qp_count) RC queue pairs"
		return 1
	}
	after=$(kernel_kib)
	echo "slab and vmalloc after: $after KiB (baseline $base)"
	# What the connections took is back, but for allocator caches: within 1 MiB.
	[ "$after" -lt $((base + 1024)) ]
}
ipoib_check "the peers gone: every connection destroyed, memory back to the baseline" gone

reachable() {
	ip netns add crowd && ip link set "$ib_a" netns crowd &&
		ip -n crowd addr add 198.51.100.1/24 dev "$ib_a" && ip -n crowd link set "$ib_a" up &&
		wait_for 30 ip netns exec crowd ping -c 1 -W 2 198.51.100.2
}
ipoib_check "$ib_b still takes a connection" reachable
ip netns del crowd 2>/dev/null
KLOG_MARK=$start_mark
ipoib_check "unloaded, kernel log clean" eval 'wait_for 10 eval "rmmod $MODULE" && klog_clean_since'
ktap_finished
