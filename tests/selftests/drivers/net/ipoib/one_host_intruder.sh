#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A hostile connected-mode peer: rdma_rs_selftest.ko, loaded with ipoib_qpn=QPN
# (tests/kmod/ipoib_intruder.rs), connects from rxe0 to the IPoIB service of the interface
# of rxe1 through the IB CM.
#
# A request for an unreliable connection (UC) and one announcing a receive size of 0 are
# refused with a REJ (cm_rx_rejected). Over an accepted connection it sends messages no
# IPoIB peer sends: 2 bytes, an unknown ethertype, noise as IPv4, one larger than the
# receive buffers. The interface counts them exactly (rx_errors +2; rx_dropped +1: the
# unknown ethertype passed up and dropped by the stack; cm_rx_accepted +1, cm_rx_rejected
# +2), destroys the broken connection once its queue pair drained, and keeps working: before
# and after, it reaches the interface of rxe0 from another namespace. The interface's REP
# carries RNR retry count 7 (RoCE's choice) where the REQ asked 6.
. "$(dirname "$0")/lib.sh"

SELFTEST=rdma_rs_selftest
NS=ipoibintruder

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1 || ! modinfo "$SELFTEST" >/dev/null 2>&1; then
	ktap_skip_all "$MODULE or $SELFTEST not built"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
ktap_set_plan 14
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
# The target stays in this namespace (ethtool and sysfs reach it); rxe0's moves.
setup() {
	[ -n "$ib_a" ] && [ -n "$ib_b" ] || return 1
	ip netns add "$NS" && ip link set "$ib_a" netns "$NS" &&
		ip -n "$NS" addr add 198.51.100.1/24 dev "$ib_a" &&
		ip -n "$NS" link set "$ib_a" up &&
		ip addr add 198.51.100.2/24 dev "$ib_b" && ip link set "$ib_b" up &&
		ip netns exec "$NS" ping -c 1 -W 5 198.51.100.2 >/dev/null
}
ipoib_check "$ib_b (rxe1, connected mode) up, reached from $ib_a in namespace $NS" wait_for 30 setup

stat() { ethtool_stat "$ib_b" "$1"; }
# Drops counted by the interface and the stack (which drops the unknown ethertype the
# driver passes up).
dropped() { cat "/sys/class/net/$ib_b/statistics/rx_dropped"; }
qpn=0x$(cut -d: -f2-4 "/sys/class/net/$ib_b/address" | tr -d :)
before_errors=$(stat rx_errors) before_dropped=$(dropped)
before_accepted=$(stat cm_rx_accepted) before_drained=$(stat cm_rx_drained)
before_rejected=$(stat cm_rx_rejected)
klog_mark
modprobe "$SELFTEST" ipoib_qpn="$qpn" || ktap_print_msg "modprobe $SELFTEST ipoib_qpn=$qpn failed"
results=$(klog_since | sed -n "s/^.*$SELFTEST: //p")
ktap_relay "$results"
rmmod "$SELFTEST" 2>/dev/null

counted() {
	echo "rx_errors $before_errors -> $(stat rx_errors)," \
		"rx_dropped $before_dropped -> $(dropped)," \
		"cm_rx_accepted $before_accepted -> $(stat cm_rx_accepted)," \
		"cm_rx_rejected $before_rejected -> $(stat cm_rx_rejected)"
	# Two requests refused, one accepted; the short message and the one over the buffers
	# are errors, the unknown type passed up and dropped by the stack.
	[ "$(stat cm_rx_rejected)" -eq $((before_rejected + 2)) ] &&
		[ "$(stat cm_rx_accepted)" -eq $((before_accepted + 1)) ] &&
		[ "$(stat rx_errors)" -eq $((before_errors + 2)) ] &&
		[ "$(dropped)" -eq $((before_dropped + 1)) ]
}
desc="$ib_b counted the refused requests, the short and oversize messages as errors,"
desc+=" the unknown type dropped by the stack"
ipoib_check "$desc" counted
drained() {
	wait_for 10 eval '[ "$(stat cm_rx_drained)" -gt "$before_drained" ]' || {
		echo "cm_rx_drained $before_drained -> $(stat cm_rx_drained)"
		cat /sys/kernel/debug/ipoib/"$ib_b"_cm 2>/dev/null
		return 1
	}
}
ipoib_check "the broken connection destroyed once its queue pair drained" drained
ipoib_check "$ib_b still reached from $ib_a" ip netns exec "$NS" ping -c 2 -W 5 198.51.100.2
ip netns del "$NS"
KLOG_MARK=$start_mark
ipoib_check "unloaded, kernel log clean" eval 'wait_for 10 eval "rmmod $MODULE" && klog_clean_since'
ktap_finished
